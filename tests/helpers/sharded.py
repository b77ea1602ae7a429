"""What the sharded-training tests share (``test_sharded_training.py``, ``test_sharded_vllm.py``, the kill tests):
the training flags of a tiny run, torchrun launches (one machine, or two one-process "nodes" on a
loopback rendezvous), reading what the runs and ``sharded_entry.py`` wrote, the checks that a run
really sharded (FSDP2) or partitioned (ZeRO-3) the senior, and the kill-and-resume comparison."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from helpers.gloo import node_cmd

ENTRY = str(Path(__file__).resolve().parents[1] / "distributed" / "sharded_entry.py")
METRICS = ("loss", "reward/mean", "senior/token_share", "response/mean_length", "kl/junior", "grad_norm")
REWARD = '''import time


def spaces(prompts, completions, **kwargs):
    time.sleep(0.3)  # each step outlasts the kill test's polling
    return [c.count(" ") / 10 for c in completions]
'''


def train_flags(world, out, steps, *extra):
    return ["--senior", str(world / "senior"), "--junior", str(world / "junior"), "--dataset",
            str(world / "data.jsonl"),
            "--dataset-split", "none", "--val-size", "4", "--template", "plain", "--lr", "1e-2", "--group-size", "4",
            "--prompts-per-step", "2", "--prompts-per-minibatch", "2", "--max-prompt-tokens", "64",
            "--max-new-tokens", "12", "--temperature", "1.0", "--max-steps", str(steps), "--eval-every", "2",
            "--save-every", "2", "--kl-every", "1", "--reward", f"{world / 'reward.py'}:spaces",
            "--output-dir", str(out), *extra]


def child_env(**extra):
    return {**os.environ, "TANDEM_THREADS": "1", "OMP_NUM_THREADS": "1", **extra}


def torchrun(*args):
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *args]


def run_ok(cmd, **env) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True, env=child_env(**env), timeout=1800)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def train_here(*argv: str) -> None:
    """``tandem train ARGV`` through the CLI's ``main`` in this process, on one thread (what ``child_env`` gives a
    launched run, so a one-process reference sums as the processes it is compared with do); torch's thread count
    is put back after. A one-process run needs no fresh interpreter, only the launches do."""
    import torch

    from tandem_rlvr.cli import main

    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TANDEM_THREADS", "1")
        try:
            assert main(["train", *argv]) == 0, "tandem train failed (its error is above)"
        finally:
            torch.set_num_threads(threads)


def signal_all(pid: int, sig) -> None:
    """``sig`` to a torchrun agent and every worker under it (torchrun starts each worker in a
    session of its own, so signalling the agent's process group would miss them)."""
    import psutil

    agent = psutil.Process(pid)
    for p in [*agent.children(recursive=True), agent]:
        try:
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


def update_rows(run: Path) -> dict[int, dict]:
    rows = [json.loads(x) for x in (run / "log.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in rows if "loss" in r}


def rank_records(out: Path) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def assert_sharded(records):
    """Each process holds exactly half of every parameter: FSDP2 really sharded it."""
    for name in records[0]["fractions"]:
        assert [r["fractions"][name] for r in records] == [0.5, 0.5], name


def assert_partitioned(ranks, hidden: int):
    """ZeRO-3 really partitioned the senior: every matrix is split in two halves (its storage released
    outside the forward), and only vectors under the persistence threshold (10 x ``hidden`` elements)
    stay whole on both ranks."""
    for name, parts in ranks[0]["partitions"].items():
        both = [r["partitions"][name] for r in ranks]
        if [r["fractions"][name] for r in ranks] == [1.0, 1.0]:
            assert both[0]["dims"] == 1 and both[0]["whole"] < 10 * hidden, name
        else:
            assert [b["local"] * 2 for b in both] == [parts["whole"]] * 2 and [b["resident"] for b in both] == [0,
                                                                                                                0], name
    assert all(r["fractions"]["lm_head.weight"] == 0.5 for r in ranks)


def assert_lora_partitioned(ranks, hidden: int, adapters: int):
    """ZeRO-3 partitioned a LoRA senior: ``adapters`` adapter tensors (A and B of each targeted layer), every
    base matrix split in halves with its gathered storage released, and only tensors under DeepSpeed's
    persistence threshold (10 x ``hidden`` elements: the adapters of these tiny models, the norms) whole on
    both ranks; the senior was loaded straight into partitions (``zero.Init``)."""
    assert len([n for n in ranks[0]["partitions"] if ".lora_" in n]) == adapters
    for name, parts in ranks[0]["partitions"].items():
        both = [r["partitions"][name] for r in ranks]
        if parts["dims"] == 2 and ".lora_" not in name:
            assert [b["local"] * 2 for b in both] == [parts["whole"]] * 2 and [b["resident"] for b in both] == [0,
                                                                                                                0], name
        else:
            assert parts["whole"] < 10 * hidden and [r["fractions"][name] for r in ranks] == [1.0, 1.0], name
    assert all(r["loaded_partitioned"] for r in ranks)


def assert_split(ranks, sharding: str, hidden: int):
    """Each process holds half of the senior: FSDP2's shards (``assert_sharded``), ZeRO-3's partitions."""
    if sharding == "zero3":
        assert_partitioned(ranks, hidden)
    else:
        assert_sharded(ranks)


def assert_same_updates(one: dict, two: dict, steps, rel: float = 1e-5):
    for step in steps:
        for key in METRICS:
            assert two[step][key] == pytest.approx(one[step][key], rel=rel, abs=1e-7), (step, key)
    assert one[1]["loss"] != 0.0  # a real learning signal


def max_diff(a: dict, b: dict) -> float:
    assert sorted(a) == sorted(b)
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


def kill_resume_and_compare(world, baseline: Path, run: Path, sharding: str, *extra, rel: float = 1e-5,
                            weights=lambda a, b: max_diff(a, b) < 1e-4, file: str = "model.safetensors",
                            ranks: Path | None = None) -> list[dict] | None:
    """A 2-process run of ``sharding`` (``extra``: more flags, an engine) killed once ``checkpoint-2`` is
    complete, re-run: it resumes there and ends with the uninterrupted 1-process run's (``baseline``,
    4 updates) updates within ``rel`` and final weights that ``weights(baseline's, run's)`` accepts.
    The killed run's stderr is kept beside ``run`` and shown when it ends before its checkpoint.
    ``file``: the weights compared (and awaited in ``checkpoint-2``); a LoRA run's ``adapter_model.safetensors``.
    With ``ranks`` (a folder), both runs go through ``tests/distributed/sharded_entry.py`` and the resumed run's
    rank records are returned, so one killed run also answers what a 2-process run of its own would."""
    flags = train_flags(world, run, 4, "--sharding", sharding, *extra)
    if ranks is not None:
        ranks.mkdir(exist_ok=True)
    cmd = torchrun(*(("-m", "tandem_rlvr.cli", "train") if ranks is None else (ENTRY, str(ranks))), *flags)
    log = run.with_name(run.name + ".err")
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=child_env())
    deadline = time.time() + 1800
    while not (run / "checkpoint-2" / file).exists():
        assert time.time() < deadline and proc.poll() is None, \
            f"run ended or stalled before checkpoint-2:\n{log.read_text()[-3000:]}"
        time.sleep(0.1)
    signal_all(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (run / "summary.json").exists(), "killed too late: the run had finished"
    assert "resuming from checkpoint-2" in run_ok(cmd)
    assert_same_updates(update_rows(baseline), update_rows(run), (1, 2, 3, 4), rel=rel)
    assert weights(load_file(baseline / "final" / file), load_file(run / "final" / file))
    assert json.loads((run / "summary.json").read_text())["steps"] == 4
    return None if ranks is None else rank_records(ranks)


def start_nodes(port, logs: Path, *args):
    """Two one-process "nodes" of one torchrun job meeting at a loopback rendezvous (the multi-node recipe);
    node r's output in ``logs/node{r}.out`` and ``.err``."""
    return [subprocess.Popen(node_cmd(r, port, *args), stdout=open(logs / f"node{r}.out", "w"),
                             stderr=open(logs / f"node{r}.err", "w"), env=child_env())
            for r in (0, 1)]


def wait_for(path: Path, procs, limit_s: float = 1200) -> None:
    """Until ``path`` exists; fails if a process ends first or the bound passes."""
    deadline = time.time() + limit_s
    while not path.exists():
        assert time.time() < deadline and all(p.poll() is None for p in procs), f"ended or stalled before {path}"
        time.sleep(0.2)


def stop_nodes(procs) -> None:
    """Kill what is left of each torchrun agent's job, and reap it."""
    for p in procs:
        if p.poll() is None:
            signal_all(p.pid, signal.SIGKILL)
        p.wait()
