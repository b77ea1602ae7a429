"""Under a multi-process launch every process compares its settings with rank 0's (rl/same_settings.py):
two gloo processes started with different --lr both refuse, naming lr and both values; alike ones pass."""

from __future__ import annotations

import pytest

from tandem_rlvr.rl.same_settings import describe, differing

from helpers.gloo import launcher_errors, loopback_nodes, spawn_ranks


def _check(rank: int, lrs: list, out: str) -> str:
    from tandem_rlvr.config import load_train_config
    from tandem_rlvr.rl.same_settings import check

    check(load_train_config("tiny", None, {"lr": lrs[rank], "output_dir": f"{out}/run-{rank}"}))  # dirs may differ
    return "ok"


def _launch(tmp_path, lrs: list) -> list[str]:
    return spawn_ranks(_check, len(lrs), (lrs, str(tmp_path)), tmp_path)


def test_two_processes_with_different_lr_both_refuse_naming_lr_and_both_values(tmp_path):
    said = _launch(tmp_path, [1e-4, 1e-2])
    for line in said:
        assert "\n" not in line
        assert line.startswith("the processes of this launch were started with different settings: lr differ")
        assert "rank 0 has 0.0001; rank 1 has 0.01" in line
    assert said[0] == said[1]


def test_two_processes_with_the_same_settings_pass(tmp_path):
    assert _launch(tmp_path, [1e-4, 1e-4]) == ["ok", "ok"]


def _build(rank: int, lrs: list, out: str) -> str:
    """One process of a torchrun-like launch of ``build_run`` (the launcher's environment, gloo)."""
    from tandem_rlvr.config import load_train_config
    from tandem_rlvr.rl.assemble import build_run

    cfg = load_train_config("tiny", None, {"lr": lrs[rank], "senior_device": "cpu", "output_dir": f"{out}/run"})
    build_run(cfg, print_fn=lambda *_: None).close()
    return "trained"


def test_a_launch_whose_nodes_differ_in_lr_is_refused_on_every_rank_before_the_run_directory_is_written(tmp_path):
    for line in spawn_ranks(_build, 2, ([1e-4, 1e-2], str(tmp_path)), tmp_path, group=False):
        assert line.startswith("the processes of this launch were started with different settings: lr differ"), line
    assert not (tmp_path / "run" / "config.json").exists()


def test_every_key_that_differs_from_rank_0_is_named_with_the_ranks():
    s0 = {"lr": "0.0001", "junior": "\"a\"", "seed": "1"}
    s1 = {"lr": "0.01", "junior": "\"a\"", "seed": "1"}
    s2 = {"lr": "0.0001", "junior": "\"b\""}  # seed missing on rank 2: differs
    assert differing([s0, s1, s2]) == ["junior", "lr", "seed"]
    line = describe([s0, s1, s2])
    assert "junior, lr, seed differ between rank 0 and ranks 1, 2" in line
    assert "(junior: rank 0 has \"a\"; rank 1 has \"a\"; rank 2 has \"b\")" in line


@pytest.mark.parametrize("same", [[{"a": "1"}], [{"a": "1"}, {"a": "1"}]])
def test_alike_settings_differ_nowhere(same):
    assert differing(same) == []


@pytest.mark.slow
def test_two_torchrun_nodes_with_different_lr_exit_2_with_the_line_above_the_launchers_banner(tmp_path):
    """The issue's case: two one-process "nodes" on a loopback rendezvous, node 1 with --lr 1e-2."""
    procs = loopback_nodes([["train", "--preset", "tiny", "--senior-device", "cpu", "--lr", lr, "--output-dir",
                             str(tmp_path / "run")] for lr in ("1e-4", "1e-2")])
    for p in procs:
        err = launcher_errors(p)  # exit status 2, the CLI's error status, not a crash at exit
        first = [i for i, line in enumerate(err) if line.startswith("tandem: error: ")]
        banner = [i for i, line in enumerate(err) if "ChildFailedError" in line]
        assert first and banner and first[0] < banner[0], err  # the line, then the launcher's report
        assert "different settings: lr differ" in err[first[0]] and "rank 1 has 0.01" in err[first[0]]
    assert not (tmp_path / "run" / "config.json").exists()
