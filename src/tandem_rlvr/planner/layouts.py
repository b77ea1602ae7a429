"""Which layout a run needs on N GPUs, from the memory plan (``tandem train --dry-run``; docs/scale.md).

Two placements of the rollouts, as RL trainers lay them out:

- colocated: every GPU trains (one process each) and runs its own vLLM engine beside the trainer,
  asleep during updates (``engine: vllm``, ``vllm_sleep: true``). vLLM gets the memory the
  trainer leaves during rollouts: the pair's bf16 weights, the KV caches (and linear-attention
  states) of the run's rollout batch, and ``VLLM_OVERHEAD_GIB`` for its activations and CUDA graphs.
- split: half the GPUs train and each training process decodes on a GPU of its own (the hf
  decoder's ``rollout_device`` beside the junior, as the paper preset does on 2 GPUs; a
  ``tandem serve`` on those GPUs with ``engine: vllm-server`` holds the same weights and caches).

On each, the layouts are tried cheapest first (``candidates``: whole copies, then sharding, then
offload to host memory, which costs step time) and the first that fits is the recommendation.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.shardings import PLAN_NAMES
from ..errors import TandemError
from ..models import model_config
from .memory import GPU_MARGIN_GIB, HOST, OFFLOADS, GiB, Layout, Plan, plan
from .shapes import Shape

VLLM_OVERHEAD_GIB = 2.0  # vLLM's activations, sampler and CUDA graphs beside weights and KV cache (assumed)
GPU_COUNTS = (2, 4, 8)


@dataclass(frozen=True)
class Option:
    gpus: int
    placement: str  # colocated | split
    layout: Layout
    plan: Plan
    fits: bool
    vllm_share: float = 0.0  # colocated: the vllm_gpu_memory_utilization it needs

    def peaks(self) -> dict[str, float]:
        return {d: self.plan.peak(d)[0] for d in self.plan.devices()}

    def summary(self) -> str:
        peaks = self.peaks()
        gpu = [f"{d} {peaks[d] / GiB:.1f}" for d in peaks if d != HOST]
        host = f", host {peaks[HOST] / GiB:.1f} GiB per process" if HOST in peaks else ""
        share = f", vLLM share {self.vllm_share:.2f}" if self.placement == "colocated" else ""
        return f"{self.layout.describe()}: peak GiB {', '.join(gpu)}{host}{share}"


def _placed(cfg, placement: str, share: float = 0.3):
    if placement == "colocated":
        return cfg.with_keys(engine="vllm", vllm_sleep=True, senior_device="cuda:0", junior_device=None,
                             rollout_device=None, vllm_gpu_memory_utilization=share)
    return cfg.with_keys(engine="hf", senior_device="cuda:0", junior_device="cuda:1", rollout_device="cuda:1")


def vllm_need(cfg, processes: int) -> float:
    """Bytes one colocated vLLM engine needs: the pair's bf16 weights, the KV caches and
    linear-attention states of one rollout batch of a process, and ``VLLM_OVERHEAD_GIB``. A junior
    pool: every junior's weights and caches (one engine holds them all and runs each on every token)."""
    S = Shape.of(model_config(cfg.models.senior))
    juniors = [Shape.of(model_config(n)) for n in cfg.models.pool.names] if cfg.models.junior else [S]
    both = cfg.method_kind.junior_in_rollout
    rows = cfg.rollout.rollout_batch_rows or cfg.loop.prompts_per_step * cfg.rollout.group_size // processes
    seq = cfg.data.max_prompt_tokens + cfg.rollout.max_new_tokens
    weights = (S.params + (sum(J.params for J in juniors) if both else 0)) * 2
    caches = rows * (seq * S.kv_bytes_per_token(_bf16()) + S.state_bytes_per_row)
    if both:
        caches += sum(rows * (seq * J.kv_bytes_per_token(_bf16()) + J.state_bytes_per_row) for J in juniors)
    return weights + caches + VLLM_OVERHEAD_GIB * GiB


def _bf16():
    import torch

    return torch.bfloat16


def _fits(p: Plan, gib: float) -> bool:
    return all(p.peak(d)[0] / GiB <= gib - GPU_MARGIN_GIB for d in p.devices() if d.startswith("cuda"))


def option(cfg, gpus: int, placement: str, layout: Layout, gib: float) -> Option:
    """``layout`` of ``cfg`` on ``gpus`` GPUs of ``gib`` GiB placed as ``placement``."""
    if placement == "colocated":
        share = min(1.0, -(-vllm_need(cfg, layout.processes) * 100 // (gib * GiB)) / 100)  # rounded up to 0.01
        p = plan(_placed(cfg, placement, share), gpu_gib=gib, layout=layout)
        return Option(gpus, placement, layout, p, _fits(p, gib) and share < 1.0, share)
    p = plan(_placed(cfg, placement), gpu_gib=gib, layout=layout)
    return Option(gpus, placement, layout, p, _fits(p, gib))


def recommend(cfg, gpus: int, placement: str, gib: float) -> tuple[Option | None, list[Option]]:
    """(the cheapest of ``candidates()`` that fits, with every GPU used by ``placement``, or None;
    the cheaper ones that do not fit)."""
    processes = gpus if placement == "colocated" else gpus // 2
    rejected = []
    for sharding, offload in _candidates(cfg):
        try:
            o = option(cfg, gpus, placement, Layout(processes, sharding, offload, cfg.models.lora_r), gib)
        except TandemError:  # the batch does not split over this many processes
            break
        if o.fits:
            return o, rejected
        rejected.append(o)
    return None, rejected


def cheapest_fit(cfg, requested: Layout, gib: float) -> Layout | None:
    """When ``requested`` does not fit: the cheapest layout on the run's own devices that does,
    first on as many processes, then on twice as many (up to 64)."""
    n = requested.processes
    while n <= 64:
        for sharding, offload in _candidates(cfg, requested.lora_r):
            try:
                lay = Layout(n, sharding, offload, requested.lora_r, requested.sync_bucket_mib)
                if _fits(plan(cfg, gpu_gib=gib, layout=lay), gib):
                    return lay
            except TandemError:
                return None
        n *= 2
    return None


def candidates() -> list[tuple[str, str]]:
    """(plan sharding, offload) of every registered backend the plan can price, cheapest first: each offload
    level (none, optimizer, all: more offload costs more step time) over the backends in registry order
    (whole copies, FSDP2, ZeRO-3, then plug-ins')."""
    return [(k.plan_name, off) for off in OFFLOADS for k in PLAN_NAMES.values()
            if off in k.offloads and (k.memory or not k.shards_parameters)]


def _candidates(cfg, lora_r: int | None = None):
    """``candidates()`` the run can train with (LoRA trains under each: DDP, FSDP2, ZeRO-3)."""
    return candidates()


def layouts_table(cfg, gib: float, counts=GPU_COUNTS) -> str:
    """Markdown table: per GPU count and placement, the recommended layout and its peaks."""
    room = gib - GPU_MARGIN_GIB
    lines = [f"| GPUs ({gib:g} GiB) | rollouts | recommended layout | its peaks | cheaper layouts, too big for "
             f"{room:g} GiB |", "|---|---|---|---|---|"]
    for gpus in counts:
        for placement in ("colocated", "split"):
            best, rejected = recommend(cfg, gpus, placement, gib)
            where = "vLLM beside each trainer, asleep during updates" if placement == "colocated" else \
                f"{gpus // 2} training + {gpus // 2} rollout GPUs"
            over = "; ".join(f"{o.layout.describe()} {max(v for d, v in o.peaks().items() if d != HOST) / GiB:.1f}"
                             + (" (vLLM share > 1)" if o.vllm_share >= 1.0 else "") for o in rejected) or "-"
            found = f"{best.layout.describe()} | {best.summary().split(': ', 1)[1]}" if best else "nothing fits | -"
            lines.append(f"| {gpus} | {where} | {found} | {over} |")
    return "\n".join(lines)


def requested_layout(cfg, processes: int = 1, sharding: str | None = None, offload: str | None = None,
                     lora_r: int = 0, sync_bucket_mib: float | None = None) -> Layout:
    """The layout ``tandem train --dry-run`` plans (its ``--plan-*`` flags): what is not asked for (None, a
    LoRA rank of 0) is the run's own."""
    sharding = sharding or cfg.models.backend.plan_name
    offload = offload or ("all" if cfg.models.shard_offload else "none")
    return Layout(processes, sharding, offload, lora_r or cfg.models.lora_r, sync_bucket_mib or float(cfg.models.sync_bucket_mb))


def dry_run_report(cfg, lay: Layout, gib: float | None) -> str:
    """What ``tandem train --dry-run`` prints after the config: the plan of the requested layout
    (``requested_layout``), the cheapest layout that fits when it does not, and the tables
    of recommended layouts on 2, 4 and 8 GPUs (of ``gib``, else 80 GiB): synchronous, and overlapped
    (``overlap.overlapped_table``, at the run's ``max_staleness`` or 1)."""
    from .memory import render

    p = plan(cfg, gpu_gib=gib, layout=lay)
    out = [f"\nmemory plan (one training process of {lay.describe()}; peak per device):", render(cfg, p, gib)]
    if gib is not None and not _fits(p, gib):
        alt = cheapest_fit(cfg, lay, gib)
        out.append(f"cheapest layout that fits: {alt.describe()} (--plan-processes {alt.processes} --plan-sharding "
                   f"{alt.sharding} --plan-offload {alt.offload})" if alt else
                   "no layout of up to 64 processes fits these devices")
    table = gib or 80.0
    out += [f"\nrecommended layouts on {', '.join(map(str, GPU_COUNTS))} GPUs of {table:g} GiB (docs/scale.md):",
            layouts_table(cfg, table)]
    from .overlap import overlapped_table, staleness_of

    k = max(1, staleness_of(cfg))
    out += [f"\noverlapped (max_staleness {k}: rollouts on a `tandem serve` vLLM server on GPUs of its own, "
            f"tensor-parallel over them, while the others train; docs/scale.md):",
            overlapped_table(cfg, table, staleness=k)]
    return "\n".join(out)
