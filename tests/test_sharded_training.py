"""Sharded training (FSDP2 and DeepSpeed ZeRO-3 through accelerate) on CPU: two gloo processes under
torchrun against one.

Every run here really shards: each process reports the share of every parameter it holds
(``tests/sharded_entry.py``), and the tests assert it is 1/2 (accelerate would otherwise run DDP
on a CPU machine without a word, and the equalities below would test nothing; under ZeRO-3 the
parameters below DeepSpeed's persistence threshold, 10 x hidden elements, stay whole). Models: random
two-layer Qwen3s of ``conftest.make_model`` (every dimension even, so FSDP2's row shards split
exactly in two); reward: spaces per completion (a learning signal without a trained model).

Tolerances: losses and step metrics rel 1e-5 (the two layouts sum the same gradients in another
order); weights after the updates within 1e-4 absolute at lr 1e-2 (AdamW divides by the root of
the second moment, which magnifies rounding on near-zero gradients: measured 7.8e-6 under FSDP2).

Run: ``python -m pytest -m slow tests/test_sharded_training.py``.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from conftest import save_training_inputs

pytestmark = pytest.mark.slow

ENTRY = str(Path(__file__).with_name("sharded_entry.py"))
METRICS = ("loss", "reward/mean", "senior/token_share", "response/mean_length", "kl/junior", "grad_norm")
REWARD = '''import time


def spaces(prompts, completions, **kwargs):
    time.sleep(0.3)  # each step outlasts the kill test's polling
    return [c.count(" ") / 10 for c in completions]
'''


@pytest.fixture(scope="module")
def world(tmp_path_factory, tok):
    root = tmp_path_factory.mktemp("sharded")
    save_training_inputs(root, tok, layers=2)
    (root / "reward.py").write_text(REWARD)
    return root


def _flags(world, out, steps, *extra):
    return ["--senior", str(world / "senior"), "--junior", str(world / "junior"), "--dataset", str(world / "data.jsonl"),
            "--dataset-split", "none", "--val-size", "4", "--template", "plain", "--lr", "1e-2", "--group-size", "4",
            "--prompts-per-step", "2", "--prompts-per-minibatch", "2", "--max-prompt-tokens", "64",
            "--max-new-tokens", "12", "--temperature", "1.0", "--max-steps", str(steps), "--eval-every", "2",
            "--save-every", "2", "--kl-every", "1", "--reward", f"{world / 'reward.py'}:spaces",
            "--output-dir", str(out), *extra]


def _env(**extra):
    return {**os.environ, "TANDEM_THREADS": "1", "OMP_NUM_THREADS": "1", **extra}


def _torchrun(*args):
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *args]


def _run(cmd, **env) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True, env=_env(**env), timeout=1800)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def _signal_all(pid: int, sig) -> None:
    """``sig`` to a torchrun agent and every worker under it (torchrun starts each worker in a
    session of its own, so signalling the agent's process group would miss them)."""
    import psutil

    agent = psutil.Process(pid)
    for p in [*agent.children(recursive=True), agent]:
        try:
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


def _updates(run: Path) -> dict[int, dict]:
    rows = [json.loads(x) for x in (run / "log.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in rows if "loss" in r}


def _ranks(out: Path) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def _entry(world, run: Path, flags: list[str], **env) -> tuple[Path, list[dict]]:
    """A 2-process run of 2 updates through ``sharded_entry.py``; (its run dir, the rank reports)."""
    out = run.with_name(run.name + "-ranks")
    out.mkdir()
    _run(_torchrun(ENTRY, str(out), *_flags(world, run, 2, *flags)), **env)
    return run, _ranks(out)


def _assert_sharded(ranks):
    """Each process holds exactly half of every parameter: FSDP2 really sharded it."""
    for name in ranks[0]["fractions"]:
        assert [r["fractions"][name] for r in ranks] == [0.5, 0.5], name


def _assert_same_updates(one: dict, two: dict, steps):
    for step in steps:
        for key in METRICS:
            assert two[step][key] == pytest.approx(one[step][key], rel=1e-5, abs=1e-7), (step, key)
    assert one[1]["loss"] != 0.0  # a real learning signal


def _max_diff(a: dict, b: dict) -> float:
    assert sorted(a) == sorted(b)
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


@pytest.fixture(scope="module")
def baseline(world):
    """One process, no sharding, four updates (checkpoints at 2 and 4)."""
    out = world / "one"
    _run([sys.executable, "-m", "tandem_rlvr.cli", "train", *_flags(world, out, 4)])
    return out


def _two_processes_like_one(world, baseline, tmp_path, sharding: str) -> tuple[Path, list[dict]]:
    """A 2-process ``sharding`` run of 2 updates against the 1-process baseline: its updates, its
    final/ and its checkpoint-2 HF weights, and every process's rollout copy; (run dir, rank reports)."""
    run, ranks = _entry(world, tmp_path / sharding, ["--sharding", sharding])
    assert [r["summary"]["processes"] for r in ranks] == [2, 2]
    _assert_same_updates(_updates(baseline), _updates(run), (1, 2))
    # final/ (gathered, compute dtype = fp32 on CPU) and checkpoint-2's HF weights against the one-process masters
    masters = load_file(baseline / "checkpoint-2" / "model.safetensors")
    assert _max_diff(masters, load_file(run / "final" / "model.safetensors")) < 1e-4
    assert _max_diff(masters, load_file(run / "checkpoint-2" / "model.safetensors")) < 1e-4
    # every process decoded its rollouts and validation with a copy refreshed by gathering
    assert all(r["copy_equal"] for r in ranks) and all(r["copy_syncs"] == 3 for r in ranks)
    return run, ranks


def test_two_process_fsdp2_gives_the_one_process_losses_metrics_and_weights(world, baseline, tmp_path):
    run, ranks = _two_processes_like_one(world, baseline, tmp_path, "fsdp2")
    _assert_sharded(ranks)
    assert (run / "checkpoint-2" / "pytorch_model_fsdp_0").is_dir()  # FSDP's per-rank shards beside the HF weights


def test_rollout_copy_is_the_gathered_senior_in_bf16_and_gradients_reduce_in_fp32(world, tmp_path):
    run, out = tmp_path / "bf16", tmp_path / "ranks"
    out.mkdir()
    _run(_torchrun(ENTRY, str(out), *_flags(world, run, 2, "--sharding", "fsdp2", "--dtype", "bfloat16")))
    ranks = _ranks(out)
    _assert_sharded(ranks)
    assert all(r["copy_equal"] for r in ranks)  # bit for bit: cast on the shard, then gathered
    assert all(r["mixed_precision"] == {"param": "torch.bfloat16", "reduce": "torch.float32"} for r in ranks)
    assert all(r["master_dtype"] == "torch.float32" for r in ranks)
    from transformers import AutoModelForCausalLM

    for name in ("best", "final"):  # loadable, in the compute dtype
        m = AutoModelForCausalLM.from_pretrained(run / name)
        assert next(m.parameters()).dtype == torch.bfloat16


def test_an_accelerate_fsdp_launch_shards_reduces_in_fp32_and_keeps_the_klreg_junior_whole(world, tmp_path):
    """What ``accelerate launch --config_file`` exports for ``distributed_type: FSDP``, ``fsdp_version: 2``,
    ``mixed_precision: bf16`` (no --sharding flag); TRL would shard KL-Reg's reference in place
    (``prepare_fsdp``): ours is the junior, kept whole and frozen."""
    run, ranks = _entry(world, tmp_path / "klreg", ["--method", "klreg", "--eval-every", "0"],
                        ACCELERATE_USE_FSDP="true", FSDP_VERSION="2", ACCELERATE_MIXED_PRECISION="bf16")
    _assert_sharded(ranks)
    assert json.loads((run / "config.json").read_text())["sharding"] == "fsdp2"
    assert all(r["mixed_precision"]["reduce"] == "torch.float32" for r in ranks)
    for r in ranks:
        assert set(r["junior_fractions"].values()) == {1.0} and r["junior_unchanged"]
    assert _updates(run)[2]["kl/beta_term"] > 0  # the junior was the reference of a real KL term


def test_killed_sharded_run_resumes_to_the_uninterrupted_run(world, baseline, tmp_path):
    _kill_resume_and_compare(world, baseline, tmp_path / "killed", "fsdp2")


def _kill_resume_and_compare(world, baseline, run: Path, sharding: str) -> None:
    """A 2-process run of ``sharding`` killed once ``checkpoint-2`` is complete, re-run: it resumes
    there and ends with the uninterrupted 1-process run's updates and final weights."""
    cmd = _torchrun("-m", "tandem_rlvr.cli", "train", *_flags(world, run, 4, "--sharding", sharding))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env())
    deadline = time.time() + 1800
    while not (run / "checkpoint-2" / "model.safetensors").exists():
        assert time.time() < deadline and proc.poll() is None, "run ended or stalled before checkpoint-2"
        time.sleep(0.1)
    _signal_all(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (run / "summary.json").exists(), "killed too late: the run had finished"
    assert "resuming from checkpoint-2" in _run(cmd)
    _assert_same_updates(_updates(baseline), _updates(run), (1, 2, 3, 4))
    assert _max_diff(load_file(baseline / "final" / "model.safetensors"),
                     load_file(run / "final" / "model.safetensors")) < 1e-4
    assert json.loads((run / "summary.json").read_text())["steps"] == 4


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _nodes(port, logs: Path, *args):
    """Two one-process "nodes" of one torchrun job meeting at a loopback rendezvous (the multi-node recipe)."""
    return [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", str(r),
                              "--nproc_per_node", "1", "--master_addr", "127.0.0.1", "--master_port", str(port), *args],
                             stdout=subprocess.DEVNULL, stderr=open(logs / f"node{r}.err", "w"), env=_env())
            for r in (0, 1)]


def test_two_nodes_on_loopback_shard_and_train_like_one_process(world, baseline, tmp_path):
    run, out = tmp_path / "nodes", tmp_path / "ranks"
    out.mkdir()
    nodes = _nodes(_free_port(), tmp_path, ENTRY, str(out), *_flags(world, run, 2, "--sharding", "fsdp2"))
    for r, node in enumerate(nodes):
        assert node.wait(timeout=1800) == 0, (tmp_path / f"node{r}.err").read_text()[-3000:]
    ranks = _ranks(out)
    _assert_sharded(ranks)
    _assert_same_updates(_updates(baseline), _updates(run), (1, 2))


def test_a_stopped_node_is_an_error_for_the_other_after_the_timeout_not_a_hang(world, tmp_path):
    run = tmp_path / "lost"
    nodes = _nodes(_free_port(), tmp_path, "-m", "tandem_rlvr.cli", "train",
                   *_flags(world, run, 40, "--sharding", "fsdp2", "--dist-timeout-s", "20"))
    try:
        deadline = time.time() + 1200
        while not (run / "checkpoint-2" / "model.safetensors").exists():
            assert time.time() < deadline and all(n.poll() is None for n in nodes), "stalled before checkpoint-2"
            time.sleep(0.2)
        _signal_all(nodes[1].pid, signal.SIGSTOP)  # node 1 stops answering; node 0 waits in a collective
        assert nodes[0].wait(timeout=900) != 0  # the default timeout (1800 s) would outlast this wait
        assert not (run / "summary.json").exists()
    finally:
        for n in nodes:
            if n.poll() is None:
                _signal_all(n.pid, signal.SIGKILL)
            n.wait()


def _assert_partitioned(ranks):
    """ZeRO-3 really partitioned the senior: every matrix is split in two halves (its storage released
    outside the forward), and only vectors under the persistence threshold stay whole on both ranks."""
    for name, parts in ranks[0]["partitions"].items():
        both = [r["partitions"][name] for r in ranks]
        if [r["fractions"][name] for r in ranks] == [1.0, 1.0]:
            assert both[0]["dims"] == 1 and both[0]["whole"] < 10 * 32, name
        else:
            assert [b["local"] * 2 for b in both] == [parts["whole"]] * 2 and [b["resident"] for b in both] == [0, 0], name
    assert all(r["fractions"]["lm_head.weight"] == 0.5 for r in ranks)


def test_two_process_zero3_gives_the_one_process_losses_metrics_and_weights(world, baseline, tmp_path):
    run, ranks = _two_processes_like_one(world, baseline, tmp_path, "zero3")
    _assert_partitioned(ranks)
    # DeepSpeed's per-rank partitions beside the HF weights of the masters
    assert sorted(p.name for p in (run / "checkpoint-2" / "global_step2").glob("zero_pp_rank_*_optim_states.pt")) == \
        ["zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt"]
    assert all(set(r["junior_fractions"].values()) == {1.0} and r["junior_unchanged"] for r in ranks)


def test_an_accelerate_zero3_launch_in_bf16_reduces_in_fp32_decodes_the_gathered_senior_and_keeps_the_junior_whole(
        world, tmp_path):
    """What ``accelerate launch --config_file`` exports for ``distributed_type: DEEPSPEED``,
    ``zero_stage: 3`` (no --sharding flag), a bf16 KL-Reg run: bf16 partitions over fp32 masters,
    gradients reduce-scattered in fp32, the hf copy equal to the fp32 masters gathered and cast to
    bf16, and KL-Reg's reference (the junior) never handed to DeepSpeed (TRL would partition it)."""
    run, ranks = _entry(world, tmp_path / "z3launch", ["--method", "klreg", "--dtype", "bfloat16"],
                        ACCELERATE_USE_DEEPSPEED="true", ACCELERATE_DEEPSPEED_ZERO_STAGE="3",
                        ACCELERATE_MIXED_PRECISION="bf16")
    _assert_partitioned(ranks)
    assert json.loads((run / "config.json").read_text())["sharding"] == "zero3"
    assert all(r["mixed_precision"] == {"param": "torch.bfloat16", "reduce": "torch.float32"} for r in ranks)
    assert all(r["master_dtype"] == "torch.float32" for r in ranks)
    assert all(r["copy_equal"] for r in ranks)
    for r in ranks:
        assert set(r["junior_fractions"].values()) == {1.0} and r["junior_unchanged"]
    assert _updates(run)[2]["kl/beta_term"] > 0
    from transformers import AutoModelForCausalLM

    for name in ("best", "final"):  # loadable, in the compute dtype
        m = AutoModelForCausalLM.from_pretrained(run / name)
        assert next(m.parameters()).dtype == torch.bfloat16


def test_killed_zero3_run_resumes_to_the_uninterrupted_run(world, baseline, tmp_path):
    _kill_resume_and_compare(world, baseline, tmp_path / "z3killed", "zero3")
