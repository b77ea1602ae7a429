"""Overlap benchmark: a rollout step's wall-clock, synchronous vs overlapped (``max_staleness``), with the rollout
server and the trainer on one CPU core each (the same two cores for both runs).

``tandem bench overlap`` starts ``tandem serve SENIOR --junior JUNIOR --weight-sync`` pinned to one core (its vLLM
threads bound there), then trains the preset twice through it (``--engine vllm-server``), pinned to the other
core with one intra-op thread: ``--max-staleness 0``, then ``--max-staleness K``. Each run's log splits every
rollout step into the time the trainer waited for rollouts (``wall/rollout_wait_s``), the weight push
(``wall/weight_sync_s``) and the rest (training: the step's wall-clock minus the other two); the server's own
decode time is ``wall/generate_s``. The first ``warmup`` rollout steps of each run are left out. With
``repeats`` R > 1 the two runs alternate R times (synchronous, overlapped, synchronous, ...), so a drift of the
machine's speed weighs on both arms alike; each figure is then the mean over an arm's runs, and every pair's own
ratio / bound is reported too.

The server's side of each run (Linux): the CPU seconds its processes spent (``/proc``, its process group) and the
engine steps vLLM made (``vllm:iteration_tokens_total`` on its ``/metrics``). Per rollout step, against the decode's
wall-clock, they say why a decode took longer: more engine steps (requests that reached the server spread out, so
fewer rows per step), more CPU per engine step (the cores' shared caches and memory bandwidth busy with training
beside it), or CPU time below the wall-clock (the server waited: for requests, or for its core).

The bound: overlapping can hide at most the shorter of rollout and training, so from the synchronous run's own
split (rollout = its wait, train = the rest, push included) the overlapped step is at best max(rollout, train)
and the ratio overlapped / synchronous at best max(rollout, train) / (rollout + train). The push itself hides
behind nothing (the server pauses through it, the trainer sends it, and the next batch may not start before it),
so the benchmark also prints the bound with the push serial, (push + max(rollout, train)) / step, against which
the target is judged: a measured ratio within 1.15x of it (docs/overlap.md, "Measured"). It splits the rest
of the gap: how much slower each side ran beside the other, and the overlapped step over push + max(its own
decode, its own training) (the schedule's loss). Before the pairs, a short synchronous run warms the server up
(its first forwards are slow), so its counters in the first pair are not skewed.

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


def serve_pinned(senior: str, junior: str, core: int, log: Path, timeout_s: float = 600.0, extra=()):
    """``tandem serve`` pinned to ``core``; (process, URL) once it answers. ``extra``: more of its flags (vLLM's
    pass through)."""
    from ..engines.serve import healthy

    from ..engines.server_rollouts import free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "tandem_rlvr.cli", "serve", senior, "--junior", junior,
                                 "--weight-sync", "--port", str(port), *extra], stdout=f, stderr=subprocess.STDOUT,
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


def server_cpu_s(pgid: int) -> float | None:
    """CPU seconds (user + system) spent so far by the live processes of process group ``pgid`` (a server started
    with ``start_new_session``); None where ``/proc`` is not there to read."""
    root = Path("/proc")
    if not root.is_dir():
        return None
    ticks = 0
    for d in root.iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        if int(fields[2]) == pgid:  # after the name: state, ppid, pgrp, ..., utime (12th), stime (13th)
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def engine_steps(metrics_text: str) -> float | None:
    """The engine steps a vLLM server has made (the count of its ``vllm:iteration_tokens_total`` histogram, summed
    over its label sets), from its ``/metrics`` text; None when the metric is absent."""
    total, seen = 0.0, False
    for line in metrics_text.splitlines():
        if line.startswith("vllm:iteration_tokens_total_count"):
            total += float(line.rsplit(" ", 1)[1])
            seen = True
    return total if seen else None


def server_counters(proc, url: str) -> dict:
    """The server's CPU seconds and engine steps now (``None`` for one it does not report)."""
    import requests

    try:
        r = requests.get(f"{url}/metrics", timeout=30)
        steps = engine_steps(r.text) if r.ok else None
    except OSError:
        steps = None
    return {"cpu_s": server_cpu_s(proc.pid), "engine_steps": steps}


def split(log_path: Path, updates_per_batch: int, warmup: int) -> dict:
    """Mean seconds per rollout step after ``warmup`` of them: step (the updates' wall-clock summed), wait,
    push, train (the rest), the server's decode (``generate``) and the client's CPU seconds in the trainer's
    process (``client_cpu_s``, where logged), and the staleness seen; ``all_rollout_steps``
    and ``all_generate_s``: the run's rollout steps and their decode seconds, warm-up included (what the server's
    counters cover)."""
    from ..rl.callbacks import read_log

    rows = [r for r in read_log(log_path) if "loss" in r]
    steps = {}
    for r in rows:
        s = steps.setdefault((r["step"] - 1) // updates_per_batch, {"step": 0.0})
        s["step"] += r["wall/step_s"]
        for key in ("wall/rollout_wait_s", "wall/weight_sync_s", "wall/generate_s", "overlap/staleness",
                    "cpu/rollout_client_s"):
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
    if all("cpu/rollout_client_s" in s for s in timed):  # a server's rollouts: the trainer's share of the decode
        out["client_cpu_s"] = mean("cpu/rollout_client_s")
    out["all_rollout_steps"] = len(steps)
    out["all_generate_s"] = sum(s["wall/generate_s"] for s in steps.values())
    return out


def with_server(arm: dict, before: dict, after: dict) -> dict:
    """``arm`` (a ``split``) with the server's counters over its run, per rollout step of the whole run: CPU seconds
    (``cpu_s``), engine steps, CPU milliseconds per engine step, and the decode's wall-clock for comparison
    (``decode_s``); the counters a server does not report are left out."""
    n = arm["all_rollout_steps"]
    arm = {**arm, "server": {"decode_s": arm["all_generate_s"] / n}}
    cpu = None if before["cpu_s"] is None or after["cpu_s"] is None else after["cpu_s"] - before["cpu_s"]
    steps = (None if before["engine_steps"] is None or after["engine_steps"] is None
             else after["engine_steps"] - before["engine_steps"])
    if cpu is not None:
        arm["server"]["cpu_s"] = cpu / n
    if steps:
        arm["server"]["engine_steps"] = steps / n
        if cpu is not None:
            arm["server"]["cpu_ms_per_engine_step"] = 1000 * cpu / steps
    return arm


def bench_overlap(preset: str = "tiny", steps: int = 12, k: int = 1, warmup: int = 2, cores: tuple | None = None,
                  keep: str | None = None, max_new_tokens: int | None = None, repeats: int = 1,
                  serve_args=(), print_fn=print) -> dict:
    """Both runs and their split (module docstring); ``cores``: (server's, trainer's), default the first two this
    process may use; ``keep``: a folder for the runs and the server log (default: a temporary one, removed);
    ``max_new_tokens``: the rollouts' length cap (default the preset's); ``repeats``: pairs of runs, alternating;
    ``serve_args``: more flags of the server's ``tandem serve``."""
    from ..config import load_train_config
    from ..engines.vllm_engine import require_vllm

    require_vllm()
    if steps <= warmup:
        raise TandemError(f"--steps ({steps}) must exceed the {warmup} warm-up rollout steps")
    if repeats < 1:
        raise TandemError(f"--repeats must be >= 1, got {repeats}")
    allowed = sorted(os.sched_getaffinity(0))
    cores = tuple(cores) if cores else tuple(allowed[:2])
    if len(cores) != 2 or cores[0] == cores[1] or not set(cores) <= set(allowed):
        raise TandemError(f"the benchmark needs two distinct cores this process may run on (allowed: {allowed}); "
                          f"got {cores}")
    cfg = load_train_config(preset)
    senior, junior = cfg.models.senior, cfg.models.junior_spec
    root = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="tandem-bench-overlap-"))
    root.mkdir(parents=True, exist_ok=True)
    names = [(f"sync{sfx}", f"overlap{sfx}") for sfx in ([""] if repeats == 1 else range(1, repeats + 1))]
    for d in [n for pair in names for n in pair] + ["server-warmup"]:
        if (root / d).exists():
            shutil.rmtree(root / d)
    print_fn(f"server on core {cores[0]}, trainer on core {cores[1]} (one thread each); preset {preset}, "
             f"{steps} rollout steps per run, the first {warmup} not timed"
             + (f"; {repeats} pairs of runs, alternating" if repeats > 1 else ""))
    proc, url = serve_pinned(senior, junior, cores[0], root / "server.log", extra=serve_args)
    extra = [] if max_new_tokens is None else ["--max-new-tokens", str(max_new_tokens)]
    counters = {}
    try:
        print_fn(f"warming the server up: {max(warmup, 1)} rollout steps, not counted")
        train_pinned(preset, url, 0, max(warmup, 1), cores[1], root / "server-warmup", lambda *_: None, extra)
        for pair in names:
            for arm, name in zip((0, k), pair, strict=True):
                before = server_counters(proc, url)
                train_pinned(preset, url, arm, steps, cores[1], root / name, print_fn, extra)
                counters[name] = (before, server_counters(proc, url))
    finally:
        stop_server(proc)
    logs = [(root / a / "log.jsonl", root / b / "log.jsonl") for a, b in names]
    res = {"preset": preset, "max_staleness": k, "max_new_tokens": max_new_tokens or cfg.rollout.max_new_tokens,
           "cores": {"server": cores[0], "trainer": cores[1]}, "repeats": repeats, "serve_args": list(serve_args),
           **compare_runs(logs, cfg.loop.updates_per_batch, warmup, [(counters[a], counters[b]) for a, b in names]),
           "runs": str(root) if keep else None}
    if not keep:
        shutil.rmtree(root, ignore_errors=True)
    return res


def compare(sync_log: Path, over_log: Path, updates_per_batch: int, warmup: int) -> dict:
    """Both runs' splits (``split``), the ratio overlapped / synchronous step and its bound max(rollout, train) /
    (rollout + train) from the synchronous run's own split (rollout: its wait for rollouts; train: the rest)."""
    return _ratio(split(sync_log, updates_per_batch, warmup), split(over_log, updates_per_batch, warmup))


def _ratio(sync: dict, over: dict) -> dict:
    """The ratio overlapped / synchronous step, beside two bounds from the synchronous run's split (rollout: its
    wait; push; train: the rest):

    - ``bound``, the issue's: max(rollout, train + push) / step, as if the push could hide behind a decode;
    - ``serial_bound``: (push + max(rollout, train)) / step. A push hides behind nothing: the server's scheduler
      is paused through it (a forward during vLLM's layer-wise reload kills the engine) and the trainer is busy
      sending, and the batch after it may not start before it without breaking ``max_staleness``.

    And what the overlapped run's own figures say of the gap: ``schedule``, its step over push + max(its decode,
    its training) (1.0: the schedule loses nothing beyond the push; the rest of the gap is each side running
    slower beside the other), and ``corun``, its decode and its training over the synchronous run's."""
    rollout, push, train, step = sync["wait_s"], sync["push_s"], sync["train_s"], sync["step_s"]
    bound = max(rollout, train + push) / step
    serial = (push + max(rollout, train)) / step
    ratio = over["step_s"] / step
    res = {"synchronous": sync, "overlapped": over, "ratio": ratio, "bound": bound, "ratio_over_bound": ratio / bound,
           "serial_bound": serial, "ratio_over_serial_bound": ratio / serial}
    if sync["generate_s"] > 0 and train > 0:  # a log without decode times says nothing of these
        res["corun"] = {"decode": over["generate_s"] / sync["generate_s"], "train": over["train_s"] / train}
        res["schedule"] = over["step_s"] / (over["push_s"] + max(over["generate_s"], over["train_s"]))
    return res


def _mean_arm(arms: list[dict]) -> dict:
    """The arm's figures averaged over its runs (each a mean per rollout step over the same number of steps); the
    staleness is the largest seen; a figure some run lacks is left out (never a mean over the runs that have it)."""
    out = {}
    for key, v in arms[0].items():
        if not all(key in a for a in arms):
            continue
        if key == "staleness":
            out[key] = max(a[key] for a in arms)
        elif isinstance(v, dict):
            out[key] = _mean_arm([a[key] for a in arms])
        else:
            out[key] = sum(a[key] for a in arms) / len(arms)
    return out


def compare_runs(logs: list[tuple[Path, Path]], updates_per_batch: int, warmup: int,
                 counters: list | None = None) -> dict:
    """``compare`` over R pairs of runs ((synchronous log, overlapped log), ...): each arm's figures are the mean
    over its R runs, the ratio and bound come from those means, and ``pairs`` holds every pair's own ratio / bound.
    ``counters``: per pair, the server's counters around each run ((before, after) of the synchronous run, then of
    the overlapped one; ``server_counters``), added per arm (``with_server``)."""
    arms = {"synchronous": [], "overlapped": []}
    pairs, serial_pairs = [], []
    for i, (sync_log, over_log) in enumerate(logs):
        sync, over = split(sync_log, updates_per_batch, warmup), split(over_log, updates_per_batch, warmup)
        if counters is not None:
            (s0, s1), (o0, o1) = counters[i]
            sync, over = with_server(sync, s0, s1), with_server(over, o0, o1)
        arms["synchronous"].append(sync)
        arms["overlapped"].append(over)
        pair = _ratio(sync, over)
        pairs.append(pair["ratio_over_bound"])
        serial_pairs.append(pair["ratio_over_serial_bound"])
    res = _ratio(_mean_arm(arms["synchronous"]), _mean_arm(arms["overlapped"]))
    return {**res, "pairs": pairs, "serial_pairs": serial_pairs}


def report(res: dict) -> str:
    """The benchmark's table and verdict, as printed."""
    lines = [f"{'per rollout step (s)':24s} {'step':>7s} {'wait':>7s} {'push':>7s} {'train':>7s} {'decode':>7s}"
             f" {'staleness':>9s}"]
    for name in ("synchronous", "overlapped"):
        r = res[name]
        lines.append(f"{name:24s} {r['step_s']:7.3f} {r['wait_s']:7.3f} {r['push_s']:7.3f} {r['train_s']:7.3f} "
                     f"{r['generate_s']:7.3f} {r['staleness']:9.0f}")
    if any(res[name].get("server") for name in ("synchronous", "overlapped")):
        lines.append(f"{'server, per rollout step':24s} {'decode':>7s} {'CPU':>7s} {'engine steps':>12s} "
                     f"{'CPU ms per engine step':>22s}")
        for name in ("synchronous", "overlapped"):
            sv = res[name].get("server", {})
            cells = [f"{sv[key]:{fmt}}" if key in sv else "-" for key, fmt in
                     (("decode_s", "7.3f"), ("cpu_s", "7.3f"), ("engine_steps", "12.1f"),
                      ("cpu_ms_per_engine_step", "22.2f"))]
            lines.append(f"{name:24s} {cells[0]:>7s} {cells[1]:>7s} {cells[2]:>12s} {cells[3]:>22s}")
    if all("client_cpu_s" in res[name] for name in ("synchronous", "overlapped")):
        lines.append("the client's CPU in the trainer's process per rollout step (requests, answers, authorship "
                     f"replay): {res['synchronous']['client_cpu_s']:.3f} s synchronous, "
                     f"{res['overlapped']['client_cpu_s']:.3f} s overlapped")
    lines.append(f"overlapped / synchronous step: {res['ratio']:.3f} (bound max(rollout, train) / (rollout + train) "
                 f"= {res['bound']:.3f}, the push counted as training; ratio / bound {res['ratio_over_bound']:.2f})")
    lines.append(f"with the weight push serial, (push + max(rollout, train)) / step = {res['serial_bound']:.3f}: "
                 f"ratio / bound {res['ratio_over_serial_bound']:.2f}, target <= 1.15 (a push hides behind nothing: "
                 "docs/overlap.md, \"Measured\")")
    if len(res.get("pairs", ())) > 1:
        lines.append(f"ratio / bound of each pair, in run order: {', '.join(f'{x:.2f}' for x in res['pairs'])}; "
                     f"with the push serial: {', '.join(f'{x:.2f}' for x in res['serial_pairs'])} "
                     f"(the lines above: from the means over {len(res['pairs'])} runs per arm)")
    if "corun" in res:
        lines.append(f"overlapped beside synchronous: decode {res['corun']['decode']:.2f}x, training "
                     f"{res['corun']['train']:.2f}x; the overlapped step / (push + max(its decode, its training)) "
                     f"{res['schedule']:.2f}")
    return "\n".join(lines)
