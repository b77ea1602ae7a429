"""The memory planner: what a run's settings hold on each device and on the host, before any model
loads (``tandem train --dry-run``, ``docs/scale.md``).

``memory`` prices one layout (``Layout``: processes, sharding backend, offload, LoRA) from the
settings and the checkpoint's shape (``shapes``), a sharded layout by its backend row's terms (``sharded``:
FSDP2's and ZeRO-3's; ``ShardingKind.memory``); ``layouts`` compares the layouts on
2, 4 and 8 GPUs, the overlapped layout too (``max_staleness`` >= 1: a rollout server on GPUs
of its own, the trainer on the others). It reads the settings and the training code's own rules (micro-batching, LoRA's
adapter sizes); nothing in ``rl/`` reads the plan back (``tests/unit/test_import_graph.py``: the planner
sits on the floor above ``rl``).
"""
