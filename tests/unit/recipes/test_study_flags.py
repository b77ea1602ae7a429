"""``tandem study drift|pool|elegance`` (cli/recipes.py) share one parser; a flag the chosen study does not
read is refused in one line naming it, before any world loads or run starts, never silently ignored."""

from __future__ import annotations

import pytest

from tandem_rlvr.cli import main


@pytest.mark.parametrize("argv, named", [
    (["drift", "--mid-steps", "5"], "study drift does not read --mid-steps (a flag of study pool)"),
    (["drift", "--mid-steps", "10"], "study drift does not read --mid-steps"),  # the pool's default value, given
    (["pool", "--juniors", "self,weak,nosuch"], "study pool does not read --juniors (a flag of study drift)"),
    (["elegance", "--seeds", "1", "--checkpoint", "best"], "study elegance does not read --checkpoint, --seeds"),
    (["drift", "--judge", "x", "--quick"], "study drift does not read --judge (a flag of study elegance)"),
])
def test_a_flag_the_study_does_not_read_is_refused_before_any_work(tmp_path, capsys, monkeypatch, argv, named):
    import tandem_rlvr.recipes.study as study
    import tandem_rlvr.recipes.study_pool as study_pool

    def no_run(*a, **k):
        raise AssertionError("the study started")

    monkeypatch.setattr(study, "run_study", no_run)
    monkeypatch.setattr(study_pool, "run_pool_study", no_run)
    assert main(["study", *argv, "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tandem: error: ") and "\n" not in err and named in err, err
    assert not (tmp_path / "s").exists()


def test_each_studys_own_flags_reach_its_settings(tmp_path, monkeypatch):
    import tandem_rlvr.recipes.study as study
    import tandem_rlvr.recipes.study_pool as study_pool

    got = {}
    monkeypatch.setattr(study, "run_study", lambda out, s: got.update(drift=s))
    monkeypatch.setattr(study_pool, "run_pool_study", lambda out, s: got.update(pool=s))
    assert main(["study", "drift", "--juniors", "weak", "--limit", "3", "--out", str(tmp_path / "d")]) == 0
    assert main(["study", "pool", "--mid-steps", "5", "--n", "2", "--out", str(tmp_path / "p")]) == 0
    assert (got["drift"].juniors, got["drift"].limit) == (["weak"], 3)
    assert (got["pool"].mid_steps, got["pool"].n) == (5, 2)
