"""Overlap benchmark: a rollout step's wall-clock, synchronous vs overlapped (``max_staleness``), with the rollout
server and the trainer on one CPU core each (the same two cores for both runs).

``tandem bench overlap`` starts ``tandem serve SENIOR --junior JUNIOR --weight-sync`` pinned to one core (its vLLM
threads bound there), then trains the preset twice through it (``--engine vllm-server``), pinned to the other
core with one intra-op thread: ``--max-staleness 0``, then ``--max-staleness K``. Each run's log splits every
rollout step into the time the trainer waited for rollouts (``wall/rollout_wait_s``), the weight push
(``wall/weight_sync_s``) and the rest (training: the step's wall-clock minus the other two); the server's own
decode time is ``wall/generate_s``. The first ``warmup`` rollout steps of each run are left out.

The bound: overlapping can hide at most the shorter of rollout and training, so from the synchronous run's own
split (rollout = its wait, train = the rest, push included) the overlapped step is at best max(rollout, train)
and the ratio overlapped / synchronous at best max(rollout, train) / (rollout + train). The target is a
measured ratio within 1.15x of that bound (docs/overlap.md, "Measured").

Needs vLLM (the ``vllm`` extra, or the CI's vLLM environment) and two CPU cores this process may run on.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..errors import TandemError


def _pinned(core: int):
    return lambda: os.sched_setaffinity(0, {core})


def _env(core: int) -> dict:
    """One thread on ``core``: torch's, OpenMP's and vLLM's CPU worker's."""
    return {**os.environ, "TANDEM_THREADS": "1", "OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": str(core),
            "PYTHONUNBUFFERED": "1"}


def serve_pinned(senior: str, junior: str, core: int, log: Path, timeout_s: float = 600.0):
    """``tandem serve`` pinned to ``core``; (process, URL) once it answers."""
    from ..engines.serve import healthy

    from ..engines.server_rollouts import free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "tandem_rlvr.cli", "serve", senior, "--junior", junior,
                                 "--weight-sync", "--port", str(port)], stdout=f, stderr=subprocess.STDOUT,
                                env=_env(core), preexec_fn=_pinned(core), start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise TandemError(f"tandem serve exited ({proc.returncode}) before it was ready; its log: {log}")
        if healthy(url):
            return proc, url
        time.sleep(1.0)
    stop_server(proc)
    raise TandemError(f"tandem serve was not ready in {timeout_s:.0f} s; its log: {log}")


def stop_server(proc) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def train_pinned(preset: str, url: str, k: int, steps: int, core: int, out: Path, print_fn, extra=()) -> None:
    """One training run of ``steps`` rollout steps through the server, pinned to ``core`` (``extra``: flags that
    override the benchmark's, e.g. ``--eval-every``); its step lines are passed through."""
    cmd = [sys.executable, "-m", "tandem_rlvr.cli", "train", "--preset", preset, "--engine", "vllm-server",
           "--server", url, "--max-steps", str(steps), "--step-unit", "rollout", "--eval-every", "0",
           "--save-every", str(steps), "--max-staleness", str(k), "--output-dir", str(out), *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(core),
                            preexec_fn=_pinned(core))
    tail = []
    for line in proc.stdout:
        tail = (tail + [line])[-20:]
        if line.startswith("step"):
            print_fn(f"  max_staleness {k}: {line.rstrip()}")
    if proc.wait():
        raise TandemError(f"the max_staleness {k} run failed ({proc.returncode}):\n{''.join(tail)}")


def split(log_path: Path, updates_per_batch: int, warmup: int) -> dict:
    """Mean seconds per rollout step after ``warmup`` of them: step (the updates' wall-clock summed), wait,
    push, train (the rest) and the server's decode (``generate``), and the staleness seen."""
    from ..rl.callbacks import read_log

    rows = [r for r in read_log(log_path) if "loss" in r]
    steps = {}
    for r in rows:
        s = steps.setdefault((r["step"] - 1) // updates_per_batch, {"step": 0.0})
        s["step"] += r["wall/step_s"]
        for key in ("wall/rollout_wait_s", "wall/weight_sync_s", "wall/generate_s", "overlap/staleness"):
            if key in r:
                s[key] = r[key]
    timed = [s for i, s in sorted(steps.items()) if i >= warmup]
    if not timed:
        raise TandemError(f"{log_path}: no rollout step after the {warmup} warm-up ones")

    def mean(key):
        return sum(s[key] for s in timed) / len(timed)

    out = {"rollout_steps": len(timed), "step_s": mean("step"), "wait_s": mean("wall/rollout_wait_s"),
           "push_s": mean("wall/weight_sync_s"), "generate_s": mean("wall/generate_s"),
           "staleness": max(s["overlap/staleness"] for s in timed)}
    out["train_s"] = out["step_s"] - out["wait_s"] - out["push_s"]
    return out


def bench_overlap(preset: str = "tiny", steps: int = 12, k: int = 1, warmup: int = 2, cores: tuple | None = None,
                  keep: str | None = None, max_new_tokens: int | None = None, print_fn=print) -> dict:
    """Both runs and their split (module docstring); ``cores``: (server's, trainer's), default the first two this
    process may use; ``keep``: a folder for the runs and the server log (default: a temporary one, removed);
    ``max_new_tokens``: the rollouts' length cap (default the preset's)."""
    from ..config import load_train_config
    from ..engines.vllm_engine import require_vllm

    require_vllm()
    if steps <= warmup:
        raise TandemError(f"--steps ({steps}) must exceed the {warmup} warm-up rollout steps")
    allowed = sorted(os.sched_getaffinity(0))
    cores = tuple(cores) if cores else tuple(allowed[:2])
    if len(cores) != 2 or cores[0] == cores[1] or not set(cores) <= set(allowed):
        raise TandemError(f"the benchmark needs two distinct cores this process may run on (allowed: {allowed}); "
                          f"got {cores}")
    cfg = load_train_config(preset)
    senior, junior = cfg.models.senior, cfg.models.junior_spec
    root = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="tandem-bench-overlap-"))
    root.mkdir(parents=True, exist_ok=True)
    for d in ("sync", "overlap"):
        if (root / d).exists():
            shutil.rmtree(root / d)
    print_fn(f"server on core {cores[0]}, trainer on core {cores[1]} (one thread each); preset {preset}, "
             f"{steps} rollout steps per run, the first {warmup} not timed")
    proc, url = serve_pinned(senior, junior, cores[0], root / "server.log")
    extra = [] if max_new_tokens is None else ["--max-new-tokens", str(max_new_tokens)]
    try:
        train_pinned(preset, url, 0, steps, cores[1], root / "sync", print_fn, extra)
        train_pinned(preset, url, k, steps, cores[1], root / "overlap", print_fn, extra)
    finally:
        stop_server(proc)
    res = {"preset": preset, "max_staleness": k, "max_new_tokens": max_new_tokens or cfg.rollout.max_new_tokens,
           "cores": {"server": cores[0], "trainer": cores[1]},
           **compare(root / "sync" / "log.jsonl", root / "overlap" / "log.jsonl", cfg.loop.updates_per_batch, warmup),
           "runs": str(root) if keep else None}
    if not keep:
        shutil.rmtree(root, ignore_errors=True)
    return res


def compare(sync_log: Path, over_log: Path, updates_per_batch: int, warmup: int) -> dict:
    """Both runs' splits (``split``), the ratio overlapped / synchronous step and its bound max(rollout, train) /
    (rollout + train) from the synchronous run's own split (rollout: its wait for rollouts; train: the rest)."""
    sync, over = split(sync_log, updates_per_batch, warmup), split(over_log, updates_per_batch, warmup)
    rollout, train = sync["wait_s"], sync["step_s"] - sync["wait_s"]
    bound = max(rollout, train) / (rollout + train)
    ratio = over["step_s"] / sync["step_s"]
    return {"synchronous": sync, "overlapped": over, "ratio": ratio, "bound": bound, "ratio_over_bound": ratio / bound}


def report(res: dict) -> str:
    """The benchmark's table and verdict, as printed."""
    lines = [f"{'per rollout step (s)':24s} {'step':>7s} {'wait':>7s} {'push':>7s} {'train':>7s} {'decode':>7s}"
             f" {'staleness':>9s}"]
    for name in ("synchronous", "overlapped"):
        r = res[name]
        lines.append(f"{name:24s} {r['step_s']:7.3f} {r['wait_s']:7.3f} {r['push_s']:7.3f} {r['train_s']:7.3f} "
                     f"{r['generate_s']:7.3f} {r['staleness']:9.0f}")
    lines.append(f"overlapped / synchronous step: {res['ratio']:.3f} (bound max(rollout, train) / (rollout + train) "
                 f"= {res['bound']:.3f}; ratio / bound {res['ratio_over_bound']:.2f}, target <= 1.15)")
    return "\n".join(lines)
