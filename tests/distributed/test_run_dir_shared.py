"""Every process of a launch sees the run directory the main process writes (rl/run_start.py): nodes whose
--output-dir is not one shared directory are refused on every process, naming each one's directory, before
anything is written; a directory the main process cannot take is the same line on every process, not a hang."""

from __future__ import annotations

import os
import socket

import pytest

from helpers.gloo import launcher_errors, loopback_nodes, spawn_ranks


def _take(rank: int, dirs: list) -> str:
    import torch.distributed as dist

    from tandem_rlvr.rl.run_start import RunStart

    start = RunStart.take(dirs[rank], rank == 0)
    said = "ok " + " ".join(sorted(p.name for p in start.out.iterdir()))
    dist.barrier()  # rank 0's listing is taken before the others leave
    start.close()
    return said


def _launch(tmp_path, dirs: list) -> list[str]:
    return spawn_ranks(_take, len(dirs), ([str(d) for d in dirs],), tmp_path)


def test_processes_given_different_run_directories_all_refuse_naming_each_directory(tmp_path):
    a, b = tmp_path / "node0" / "run", tmp_path / "node1" / "run"
    said = _launch(tmp_path, [a, b])
    assert said[0] == said[1]
    line = said[0]
    assert "\n" not in line
    assert line.startswith("the run directory is not shared by all nodes: rank 0 on ")
    assert f"writes {a}, which rank 1 cannot see (rank 1 on {socket.gethostname()} has {b})" in line
    assert not a.exists() and not b.exists()  # each process's new directory undone


def test_processes_sharing_the_run_directory_pass_and_leave_only_the_lock(tmp_path):
    run = tmp_path / "run"
    said = _launch(tmp_path, [run, run])
    assert said == ["ok .lock"] * 2  # the main process's token is gone before anyone lists the directory


def test_a_run_directory_the_main_process_cannot_lock_is_one_line_on_every_process(tmp_path):
    import fcntl

    run = tmp_path / "run"
    run.mkdir()
    fd = os.open(run / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"pid 1 on host elsewhere\n")
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another writer holds it
    try:
        said = _launch(tmp_path, [run, run])
    finally:
        os.close(fd)
    assert said[0] == said[1]
    assert said[0].startswith(f"rank 0 could not take the run directory: {run} is being written by pid 1 on host "
                              "elsewhere"), said[0]
    assert sorted(p.name for p in run.iterdir()) == [".lock"]


@pytest.mark.slow
def test_two_torchrun_nodes_without_a_shared_run_directory_exit_2_before_training(tmp_path):
    """The issue's case: two one-process "nodes" on a loopback rendezvous, each given `--output-dir run` in
    its own working directory (as two machines without a shared filesystem would see one path)."""
    cwds = [tmp_path / "node0", tmp_path / "node1"]
    for cwd in cwds:
        cwd.mkdir()
    train = ["train", "--preset", "tiny", "--senior-device", "cpu", "--max-steps", "2", "--output-dir", "run"]
    for p in loopback_nodes([train, train], cwds):
        err = launcher_errors(p)  # exit status 2, the CLI's error status, not a crash at exit
        first = [line for line in err if line.startswith("tandem: error: ")]
        assert first and "the run directory is not shared by all nodes" in first[0], err
        assert f"writes {cwds[0] / 'run'}, which rank 1 cannot see" in first[0]
        assert f"has {cwds[1] / 'run'})" in first[0]
    assert not (cwds[0] / "run").exists() and not (cwds[1] / "run").exists()
