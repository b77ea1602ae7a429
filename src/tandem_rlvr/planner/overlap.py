"""The overlapped layout (``max_staleness`` k >= 1, docs/overlap.md): rollouts decoded on a ``tandem serve`` vLLM
server on R GPUs of its own while the trainer trains on the other T; docs/scale.md, "Overlapped rollouts".

What each side holds (per GPU):

- **rollout GPUs** (the server, tensor-parallel over R, ``--tensor-parallel-size R``): the senior's weights and,
  for a method whose rollouts the junior co-writes, every junior's, in bf16; the KV caches and linear-attention
  states of the rows every training process decodes at once (each process's rollout worker decodes one batch at
  a time, in chunks of ``rollout_batch_rows``: T chunks, at most the whole rollout batch of prompts per step x
  group size), or of T validation chunks (validation waits for the started batches: never both); one pushed weight
  bucket (``sync_bucket_mb``) as it is loaded; and ``VLLM_OVERHEAD_GIB`` per GPU for vLLM's activations, sampler and
  CUDA graphs. No optimiser state, no gradients.
- **training GPUs**: what ``memory.plan`` counts for engine ``vllm-server``: the senior's weights, gradients and
  AdamW moments (or their shards), the activations and the log-prob head of a micro-batch, the junior's weights
  (the trainer loads the pair: the KL-Reg reference and the KL monitor score with it) and its reference forward
  where the method has one, the weight-sync bucket; no rollout engine. With k >= 2 the batches queued behind the
  worker carry their own weights (``rl/overlap.py``): up to k snapshots of the senior in the engine's dtype on
  the training device (the one being decoded and the k - 1 queued).

The same state a synchronous split run holds, on the same GPUs: overlap adds k >= 2's snapshots, not memory of
its own. ``overlapped_option`` prices one (R, T, training layout); ``overlapped_table`` recommends one per GPU
count: the fewest rollout GPUs the server fits on whose remaining GPUs train the batch with a layout that fits.
"""

from __future__ import annotations

import torch

from ..errors import TandemError
from ..models import model_config
from .layouts import GPU_COUNTS, VLLM_OVERHEAD_GIB, Option, _candidates, _fits
from .memory import GPU_MARGIN_GIB, HOST, VALIDATION_ROWS, GiB, Layout, Plan, count, plan
from .shapes import Shape

SERVER = "http://rollouts:8000"  # a placeholder URL: the plan needs none, the settings need one for vllm-server


def staleness_of(cfg) -> int:
    """The run's ``max_staleness`` (0 where the setting is absent)."""
    return int(getattr(cfg.rollout, "max_staleness", 0) or 0)


def _trainer_cfg(cfg):
    """``cfg`` trained against a server: the senior (and the junior the trainer loads) on the first training GPU."""
    return cfg.with_keys(engine="vllm-server", server=cfg.rollout.server or SERVER, senior_device="cuda:0",
                         junior_device=None, rollout_device=None)


def server_items(p: Plan, cfg, rollout_gpus: int, device: str, processes: int = 1) -> None:
    """Add what one of the server's ``rollout_gpus`` GPUs holds (module docstring) to ``p`` on ``device``, serving
    ``processes`` training processes at once (each sends its chunks of ``rollout_batch_rows``)."""
    bf16 = torch.bfloat16
    S = Shape.of(model_config(cfg.models.senior))
    tandem = cfg.method_kind.junior_in_rollout
    juniors = [Shape.of(model_config(n)) for n in cfg.models.pool.names] if cfg.models.junior else [S]
    held = juniors if tandem else []
    r = rollout_gpus
    words = f", / {r} GPUs (tensor parallel)" if r > 1 else ""
    p.add(device, "resident", f"senior weights ({count(S.params)} x 2 B, bf16{words})", S.params * 2 / r)
    if held:
        p.add(device, "resident", f"junior weights ({count(sum(J.params for J in held))} x 2 B, bf16{words})",
              sum(J.params for J in held) * 2 / r)
    p.add(device, "resident", f"vLLM's activations, sampler and CUDA graphs ({VLLM_OVERHEAD_GIB:g} GiB, assumed)",
          VLLM_OVERHEAD_GIB * GiB)
    seq = cfg.data.max_prompt_tokens + cfg.rollout.max_new_tokens
    batch, chunk = cfg.loop.prompts_per_step * cfg.rollout.group_size, cfg.rollout.rollout_batch_rows
    phases = [("rollout", min(batch, processes * chunk) if chunk else batch)]
    if cfg.loop.eval_every:
        val = cfg.data.val_size * cfg.loop.eval_n
        phases.append(("validation", min(val, processes * (chunk or VALIDATION_ROWS))))
    for phase, rows in phases:
        p.add(device, phase, f"senior KV cache and states ({rows} rows x {seq} tokens{words})",
              rows * (seq * S.kv_bytes_per_token(bf16) + S.state_bytes_per_row) / r)
        if held:
            p.add(device, phase, f"junior KV cache and states ({rows} rows x {seq} tokens{words})",
                  sum(rows * (seq * J.kv_bytes_per_token(bf16) + J.state_bytes_per_row) for J in held) / r)
    bucket = min(cfg.models.sync_bucket_mb * (1 << 20), S.params * 2)
    p.add(device, "sync", f"a pushed weight bucket as it loads ({cfg.models.sync_bucket_mb:g} MiB at most)", bucket / r)


def overlapped_plan(cfg, rollout_gpus: int, layout: Layout, gpu_gib: float, staleness: int = 1) -> Plan:
    """The plan of one training GPU (cuda:0 of ``layout``'s processes) and one rollout GPU (the first after them)."""
    if rollout_gpus < 1 or staleness < 1:
        raise TandemError(f"the overlapped layout needs >= 1 rollout GPU and max_staleness >= 1, got {rollout_gpus} "
                          f"and {staleness}")
    if staleness >= 2 and (layout.processes > 1 or layout.sharded):
        raise TandemError(f"max_staleness {staleness}: above 1 the trainer is one unsharded process "
                          f"(rl/overlap.py's weight snapshots), not {layout.describe()}")
    p = plan(_trainer_cfg(cfg), gpu_gib=gpu_gib, layout=layout)
    if staleness >= 2:
        S = Shape.of(model_config(cfg.models.senior))
        p.add("cuda:0", "resident", f"weight snapshots of the queued batches ({staleness} x {count(S.params)} x 2 B, "
                                    "bf16; max_staleness >= 2)", staleness * S.params * 2)
    p.notes = [n for n in p.notes if not n.startswith("engine vllm-server: rollouts")]
    server_items(p, cfg, rollout_gpus, f"cuda:{layout.processes}", layout.processes)
    return p


def overlapped_option(cfg, gpus: int, rollout_gpus: int, layout: Layout, gib: float, staleness: int = 1) -> Option:
    p = overlapped_plan(cfg, rollout_gpus, layout, gib, staleness)
    return Option(gpus, f"overlapped ({gpus - rollout_gpus} + {rollout_gpus})", layout, p, _fits(p, gib))


def recommend_overlapped(cfg, gpus: int, gib: float, staleness: int = 1) -> tuple[Option | None, list[Option]]:
    """(the fewest rollout GPUs the server fits on, with the cheapest training layout over the other GPUs that
    fits, or None; the cheaper training layouts on those GPUs that do not fit). Rollout GPU counts whose
    remaining GPUs cannot split the batch are skipped."""
    rejected: list[Option] = []
    for r in range(1, gpus):
        t = gpus - r
        server = Plan()
        server_items(server, cfg, r, "cuda:0", t)
        if not _fits(server, gib):
            continue
        tried = []
        for sharding, offload in _candidates(cfg) if staleness == 1 else [("ddp", "none")]:
            try:
                o = overlapped_option(cfg, gpus, r, Layout(t, sharding, offload, cfg.models.lora_r), gib, staleness)
            except TandemError:  # the batch does not split over t processes
                break
            if o.fits:
                return o, tried
            tried.append(o)
        rejected = rejected or tried
    return None, rejected


def overlapped_table(cfg, gib: float, counts=GPU_COUNTS, staleness: int = 1) -> str:
    """Markdown table: per GPU count, the recommended overlapped layout (training + rollout GPUs) and its peaks."""
    room = gib - GPU_MARGIN_GIB
    lines = [f"| GPUs ({gib:g} GiB) | training + rollout GPUs | training layout | peak GiB: training GPU, rollout GPU "
             f"| cheaper training layouts, too big for {room:g} GiB |", "|---|---|---|---|---|"]
    for gpus in counts:
        best, rejected = recommend_overlapped(cfg, gpus, gib, staleness)
        over = "; ".join(f"{o.layout.describe()} {o.peaks()['cuda:0'] / GiB:.1f}" for o in rejected) or "-"
        if best is None:
            lines.append(f"| {gpus} | - | nothing fits | - | {over} |")
            continue
        peaks = best.peaks()
        t = best.layout.processes
        host = f", host {peaks[HOST] / GiB:.1f} per process" if HOST in peaks else ""
        lines.append(f"| {gpus} | {t} + {gpus - t} | {best.layout.describe()} | {peaks['cuda:0'] / GiB:.1f}, "
                     f"{peaks[f'cuda:{t}'] / GiB:.1f}{host} | {over} |")
    return "\n".join(lines)
