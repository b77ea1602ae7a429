"""The rollout part: how rollouts are written (schedule, p, K, group size, sampling) and by which engine.

Derived once, here: ``sampling`` (the ``SamplingParams`` rollouts and validation sample with).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ..decoding.sampling import SamplingParams
from ..decoding.schedule import SCHEDULES, check_p_K
from ..engines.base import ENGINES, engine_help, engine_kind
from ..errors import TandemError
from ..pool import DRAWS
from .fields import at_least, check_part, setting

# how an overlapped run corrects its stale rollouts (rl.losses.importance_weights; TRL's vllm_importance_sampling_mode)
IMPORTANCE_CORRECTIONS = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


@dataclass(frozen=True)
class RolloutPart:
    """The handoff schedule and its knobs, the group of rollouts per prompt, sampling, the engine."""

    schedule: str = setting("word", "handoff schedule of tandem rollouts", choices=SCHEDULES)
    p: float = setting(0.5, "probability that the senior writes after a redraw (paper: 0.5)")
    K: int = setting(32, "word schedules: tokens before a forced redraw (paper: 32); chunk, chunk-word: tokens or "
                     "words per chunk")
    group_size: int = setting(8, "rollouts per prompt (G)")
    max_new_tokens: int = setting(3000, "longest response")
    temperature: float = setting(0.6, "rollout sampling temperature")
    top_p: float = setting(1.0, "rollout top-p", range=(0, 1, True))
    top_k: int = setting(0, "rollout top-k (0 = off)", range=(0, None, False))
    junior_draw: str = setting("group", "a junior pool: one junior per GRPO group (group: the group's rollouts, "
                               "whose rewards the advantage compares, share their partner) or one per rollout "
                               "(rollout); docs/pool.md", choices=DRAWS)
    rollout_batch_rows: int = setting(0, "rows decoded together (0: the whole per-process rollout batch)")
    engine: str = setting("hf", "rollout and validation engine; the senior's weights reach it after every optimiser "
                          "step (vllm: colocated with training; vllm-server: started with `tandem serve "
                          "--weight-sync`)", choices=ENGINES.keys(), names=lambda: engine_help())
    server: str | None = setting(None, "engine vllm-server: the server's URL, e.g. http://127.0.0.1:8000")
    vllm_gpu_memory_utilization: float = setting(0.3, "vllm engine: share of GPU memory for its weights + KV cache "
                                                 "(training shares the device)")
    vllm_kv_cache_gib: float | None = setting(None, "vllm engine: KV-cache GiB (default: from the share on GPU, 1 on "
                                              "CPU)", range=(0, None, True))
    vllm_sleep: bool = setting(False, "vllm engine: sleep (free its GPU memory) between rollouts, wake before the "
                               "next; GPU only (vLLM has no sleep mode on CPU)")
    max_staleness: int = setting(0, "rollouts overlap training: the rollout batches of the next max_staleness "
                                 "generations are decoded while this one trains, each by the weights of the update "
                                 "that started it (0: the synchronous loop; engine vllm-server, or hf with a "
                                 "rollout_device other than training's; docs/overlap.md)", range=(0, None, False))
    importance_correction: str = setting("token_truncate", "max_staleness >= 1: the importance-sampling correction "
                                         "of senior tokens, exp(log p_now - log p_behaviour), truncated at "
                                         "importance_clip (token_truncate, sequence_truncate) or zeroed above it "
                                         "(token_mask, sequence_mask), as TRL's vllm_importance_sampling_mode",
                                         choices=IMPORTANCE_CORRECTIONS)
    importance_clip: float = setting(3.0, "max_staleness >= 1: the largest importance-sampling weight (TRL's "
                                     "vllm_importance_sampling_clip_max)", range=(0, None, True))

    def __post_init__(self):
        check_part(self)
        if self.group_size < 2:
            raise TandemError(f"group_size must be >= 2 (GRPO compares rollouts of one prompt), got {self.group_size}")
        check_p_K(self.p, self.K)
        at_least(self, 1, "max_new_tokens")
        at_least(self, 0, "rollout_batch_rows")
        if not 0 < self.temperature < float("inf"):
            raise TandemError(f"temperature must be finite and > 0, got {self.temperature}")
        if engine_kind(self.engine).remote != bool(self.server):
            raise TandemError("--engine vllm-server and --server URL go together")
        if not 0.0 < self.vllm_gpu_memory_utilization <= 1.0:
            raise TandemError(f"vllm_gpu_memory_utilization must be in (0, 1], got {self.vllm_gpu_memory_utilization}")

    @cached_property
    def sampling(self) -> SamplingParams:
        """How rollouts and validation sample."""
        return SamplingParams(self.temperature, self.top_p, self.top_k, self.max_new_tokens)
