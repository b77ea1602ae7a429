"""Process-level runtime settings.

CPU threads: the models this tool runs on CPUs (the tiny world, SmolLM2-135M) do small
matmuls, where extra OpenMP threads add little; and on a busy machine OpenMP threads that
compete with other processes for cores run many times slower than one thread alone
(measured here: a 64-row tiny-world rollout took 0.5 s on 1 thread and 8-20 s on
2 threads while two other processes were busy). So we use the idle cores, at most 8.
``TANDEM_THREADS`` overrides the choice.

Reproducibility: a float32 result can depend on the thread count (a reduction split over
threads sums in another order), so a choice made from the load would let the same command
give different numbers on a busy and an idle machine. What must reproduce does not use it:
the tiny worlds always build on ``BUILD_THREADS`` (``world.build``), and ``tandem demo`` and
``tandem study drift`` run on ``configure_cpu_threads(fixed=DEMO_THREADS)`` unless ``TANDEM_THREADS``
says otherwise. (``tandem eval`` and ``tandem train`` still take the idle cores; measured: the tiny
world's 400 solo samples of ``tandem eval solo --senior tiny --limit 200 --n 2`` were the same tokens
on 1 and on 2 threads.)
"""

from __future__ import annotations

import contextlib
import os

import torch

BUILD_THREADS = 1  # every world build, whatever the load or $TANDEM_THREADS (part of the world key)
DEMO_THREADS = 1  # tandem demo and study drift, unless $TANDEM_THREADS is set (recorded in their results)


def env_threads() -> int | None:
    """$TANDEM_THREADS as a thread count (None when unset); a TandemError unless it is an integer in
    [1, this machine's cores]: more threads than cores only slows torch down, and a typo such as
    100000 would start that many OpenMP threads."""
    from .errors import TandemError, check_number

    text = os.environ.get("TANDEM_THREADS", "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise TandemError(f"$TANDEM_THREADS must be an integer number of threads, got {text!r}") from None
    return check_number(value, "$TANDEM_THREADS", 1, os.cpu_count() or 1, integer=True)


def pick_threads() -> int:
    """Idle cores by the 1-minute load average (at least 1, at most 8), or $TANDEM_THREADS."""
    if (n := env_threads()) is not None:
        return n
    cores = os.cpu_count() or 1
    busy = round(os.getloadavg()[0]) if hasattr(os, "getloadavg") else 0
    return max(1, min(8, cores - busy))


def configure_cpu_threads(fixed: int | None = None) -> int:
    """Set torch's intra-op threads (CPU runs only); return the count.

    $TANDEM_THREADS if set, else ``fixed`` if given (a count that does not depend on the
    load, for results that must reproduce), else ``pick_threads``'s choice from the load."""
    if torch.cuda.is_available():
        return torch.get_num_threads()
    n = pick_threads() if fixed is None or env_threads() is not None else max(1, fixed)
    torch.set_num_threads(n)
    return n


@contextlib.contextmanager
def intra_op_threads(n: int | None):
    """torch's intra-op thread count set to ``n`` (None: unchanged) inside the block, restored after.
    The count is process-wide: torch has no per-thread setting."""
    saved = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def invocation() -> dict:
    """The command line that is making a result and its working directory, for provenance:
    ``{"argv": sys.argv, "cwd": ...}``, recorded in every run directory (sources.json,
    legibility.json, drift.json, a training run's summary.json) and shown by ``tandem report``."""
    import sys

    return {"argv": list(sys.argv), "cwd": os.getcwd()}
