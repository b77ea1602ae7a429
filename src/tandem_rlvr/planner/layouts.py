"""Which layout a run needs on N GPUs, from the memory plan (``tandem train --dry-run``; docs/scale.md).

Two placements of the rollouts, as RL trainers lay them out:

- colocated: every GPU trains (one process each) and runs its own vLLM engine beside the trainer,
  asleep during updates (``engine: vllm``, ``vllm_sleep: true``). vLLM gets the memory the
  trainer leaves during rollouts: the pair's bf16 weights, the KV caches (and linear-attention
  states) of the run's rollout batch, and ``VLLM_OVERHEAD_GIB`` for its activations and CUDA graphs.
- split: half the GPUs train and each training process decodes on a GPU of its own (the hf
  decoder's ``rollout_device`` beside the junior, as the paper preset does on 2 GPUs; a
  ``tandem serve`` on those GPUs with ``engine: vllm-server`` holds the same weights and caches).

- overlapped (``max_staleness`` k >= 1, docs/overlap.md): rollouts decoded on a ``tandem serve`` vLLM server on
  R GPUs of its own while the trainer trains on the other T (``overlapped_plan``, ``overlapped_table``).

On each, the layouts are tried cheapest first (``candidates``: whole copies, then sharding, then
offload to host memory, which costs step time) and the first that fits is the recommendation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..config.shardings import PLAN_NAMES
from ..errors import TandemError
from ..models import model_config
from .memory import GPU_MARGIN_GIB, HOST, OFFLOADS, VALIDATION_ROWS, GiB, Layout, Plan, count, plan, rollout_rows
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
    rows = rollout_rows(cfg, processes)
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
    return Layout(processes, sharding, offload, lora_r or cfg.models.lora_r,
                  sync_bucket_mib or float(cfg.models.sync_bucket_mb))


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
    k = max(1, staleness_of(cfg))
    out += [f"\noverlapped (max_staleness {k}: rollouts on a `tandem serve` vLLM server on GPUs of its own, "
            f"tensor-parallel over them, while the others train; docs/scale.md):",
            overlapped_table(cfg, table, staleness=k)]
    return "\n".join(out)


# --------------------------------------------------------------------------- overlapped rollouts
# The overlapped layout (``max_staleness`` k >= 1, docs/overlap.md): rollouts decoded on a ``tandem serve`` vLLM
# server on R GPUs of its own while the trainer trains on the other T; docs/scale.md, "Overlapped rollouts".
#
# What each side holds (per GPU):
#
# - **rollout GPUs** (the server, tensor-parallel over R, ``--tensor-parallel-size R``): the senior's weights and,
#   for a method whose rollouts the junior co-writes, every junior's, in bf16; the KV caches and linear-attention
#   states of the rows every training process decodes at once (each process's rollout worker decodes one batch at
#   a time, in chunks of ``rollout_batch_rows``: T chunks, at most the whole rollout batch of prompts per step x
#   group size), or of T validation chunks (validation waits for the started batches: never both); one pushed weight
#   bucket (``sync_bucket_mb``) as it is loaded; and ``VLLM_OVERHEAD_GIB`` per GPU for vLLM's activations, sampler and
#   CUDA graphs. No optimiser state, no gradients.
# - **training GPUs**: what ``memory.plan`` counts for engine ``vllm-server``: the senior's weights, gradients and
#   AdamW moments (or their shards), the activations and the log-prob head of a micro-batch, the junior's weights
#   (the trainer loads the pair: the KL-Reg reference and the KL monitor score with it) and its reference forward
#   where the method has one, the weight-sync bucket; no rollout engine. With k >= 2 the batches queued behind the
#   worker carry their own weights (``rl/overlap.py``): up to k snapshots of the senior in the engine's dtype on
#   the training device (the one being decoded and the k - 1 queued).
#
# The same state a synchronous split run holds, on the same GPUs: overlap adds k >= 2's snapshots, not memory of
# its own. ``overlapped_option`` prices one (R, T, training layout); ``overlapped_table`` recommends one per GPU
# count: the fewest rollout GPUs the server fits on whose remaining GPUs train the batch with a layout that fits.

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
        for sharding, offload in candidates() if staleness == 1 else [("ddp", "none")]:
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
