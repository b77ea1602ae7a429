"""Launches of a few CPU processes that meet over gloo on a loopback port, for tests of what every process of
a launch checks: ``spawn_ranks`` (``torch.multiprocessing.spawn`` of one function per rank, each rank's answer
read back from a file) and ``node_cmd`` / ``loopback_nodes`` (one-process torchrun "nodes" on a loopback
rendezvous, the multi-node recipe on one machine)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch.multiprocessing as mp

from tandem_rlvr.engines.server_rollouts import free_port

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _rank(rank: int, fn, world: int, port: int, args: tuple, out: str, group: bool) -> None:
    import torch.distributed as dist

    from tandem_rlvr.errors import TandemError

    if group:  # the process group made here, as a launched script would
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    else:  # the launcher's environment (torchrun's variables): the code under test makes the group
        os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        said = fn(rank, *args)
    except TandemError as e:
        said = str(e)
    with open(os.path.join(out, f"rank{rank}.txt"), "w") as f:
        f.write(said)
    if dist.is_initialized():  # a refusal closes the group itself
        dist.destroy_process_group()


def spawn_ranks(fn, world: int, args: tuple, out: Path, group: bool = True) -> list[str]:
    """``fn(rank, *args)`` in ``world`` spawned processes on a free loopback port (``group``: a gloo group made
    first; else torchrun's environment variables set for the code under test to make one); each rank's
    return value, or its ``TandemError``'s line, in rank order. ``fn`` must be a module-level function."""
    mp.spawn(_rank, args=(fn, world, free_port(), args, str(out), group), nprocs=world, join=True)
    return [(out / f"rank{r}.txt").read_text() for r in range(world)]


def node_cmd(rank: int, port: int, *args: str) -> list[str]:
    """Node ``rank`` of two one-process torchrun "nodes" meeting at ``127.0.0.1:port``, running ``args``."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", str(rank),
            "--nproc_per_node", "1", "--master_addr", "127.0.0.1", "--master_port", str(port), *args]


def loopback_nodes(per_node: list[list[str]], cwds: list[Path] | None = None) -> list[subprocess.Popen]:
    """Two one-process "nodes" of one ``tandem`` launch on a free loopback port, node r running
    ``tandem <per_node[r]>`` (in ``cwds[r]``), stderr piped as text (one thread each, this tree's ``src``)."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": SRC, "TANDEM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return [subprocess.Popen(node_cmd(r, port, "-m", "tandem_rlvr.cli", *argv), cwd=None if cwds is None else cwds[r],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
            for r, argv in enumerate(per_node)]


def launcher_errors(proc: subprocess.Popen, timeout: float = 300) -> list[str]:
    """A node's stderr lines once it ended; it must have failed, with the CLI's status 2 in the launcher's report."""
    err = proc.communicate(timeout=timeout)[1].splitlines()
    assert proc.returncode != 0
    assert "exitcode  : 2 " in "\n".join(err), err  # the CLI's error status, not a crash at exit
    return err
