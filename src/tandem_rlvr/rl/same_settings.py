"""Every process of a distributed launch trains with rank 0's settings, or none trains.

Under ``torchrun`` (or ``accelerate launch``) each node parses its own command line, so a node started
with another ``--lr``, another ``--junior`` or a model directory holding other files would train with
it, silently: the processes only exchange gradients and weights, never settings. ``check`` runs once
the process group exists and before any model loads: every process gathers each one's stored config
(``rl.run_identity.stored_config``: the run's identity, model fingerprints included) as a hash, and
only when the hashes differ the configs themselves, and every process raises the same one-line
``TandemError`` naming the keys that differ from rank 0's (and both values of the first of them).

Not compared: ``PER_PROCESS`` keys, which may rightly differ between nodes (the run directory as each
node's working directory resolves it, the collective timeout).
"""

from __future__ import annotations

import hashlib
import json

from ..errors import TandemError

PER_PROCESS = ("output_dir", "dist_timeout_s")


def _settings(cfg, extra: dict | None) -> dict[str, str]:
    """{key: its value as canonical JSON} of the process's stored config, ``PER_PROCESS`` keys left out."""
    from .run_identity import stored_config

    d = {**stored_config(cfg), **(extra or {})}
    return {k: json.dumps(v, sort_keys=True, default=str) for k, v in d.items() if k not in PER_PROCESS}


def differing(settings: list[dict[str, str]]) -> list[str]:
    """Sorted keys on which some process's settings differ from rank 0's (a key missing on one side differs)."""
    from ..outdir import config_diff

    return sorted({k for s in settings[1:] for k in config_diff(settings[0], s)})


def describe(settings: list[dict[str, str]]) -> str:
    """The one-line refusal of ``settings`` (one dict per rank) that are not all alike."""
    keys = differing(settings)
    ranks = [r for r, s in enumerate(settings) if s != settings[0]]
    k = keys[0]
    shown = "; ".join([f"rank 0 has {settings[0].get(k, '(unset)')}"] +
                      [f"rank {r} has {settings[r].get(k, '(unset)')}" for r in ranks[:3]])
    return (f"the processes of this launch were started with different settings: {', '.join(keys)} differ between "
            f"rank 0 and rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} ({k}: {shown}); "
            "start every node with the same command, settings and model files")


def check(cfg, extra: dict | None = None) -> None:
    """Refuse, on every process, settings that differ from rank 0's (collective; nothing without a process
    group of two or more). ``extra``: config.json entries beyond the config's, as ``check_run_dir`` takes them."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return
    mine = _settings(cfg, extra)
    digest = hashlib.sha256(json.dumps(mine, sort_keys=True).encode()).hexdigest()
    digests: list = [None] * dist.get_world_size()
    dist.all_gather_object(digests, digest)
    if len(set(digests)) == 1:
        return
    every: list = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    dist.barrier()  # every process has what it needs before any leaves
    dist.destroy_process_group()  # the group closed in step: a peer gone first would abort this process at exit
    raise TandemError(describe(every))
