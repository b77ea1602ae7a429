"""``EvalConfig``: one ``tandem eval solo|handoff`` run (``eval.sampler.evaluate``), built once, passed whole."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from ..decoding.sampling import SamplingParams
from ..decoding.schedule import check_p_K
from ..errors import TandemError
from ..prompting import DEFAULT_INSTRUCTION
from .fields import check_seed


def paper_eval_sampling() -> SamplingParams:
    """The paper's evaluation sampling: temperature 0.7, top-p 0.8, top-k 20, 3000 new tokens."""
    return SamplingParams(0.7, 0.8, 20, 3000)


@dataclass(frozen=True)
class EvalConfig:
    """One evaluation run (``tandem eval solo|handoff``); built once by the caller, passed whole.

    mode "solo" samples the senior alone; "handoff" uses ``schedule`` with ``junior``
    (default: the senior's checkpoint). Defaults are the paper's evaluation: its sampling,
    its prompt instruction, its last-box grading. ``engine``: "hf" (our decoder, the
    reference) or "vllm" (with ``vllm_settings``, an ``engines.vllm_engine.VLLMSettings``).
    """

    senior: str = "tiny"
    junior: str | None = None
    mode: str = "solo"
    schedule: str = "paragraph-roundrobin"  # handoff mode only
    benchmarks: Sequence[str] = ("tiny",)
    split: str | None = None
    limit: int | None = None  # first N problems of each benchmark
    n: int = 8  # samples per problem
    sampling: SamplingParams = field(default_factory=paper_eval_sampling)
    template: str = "auto"
    instruction: str = DEFAULT_INSTRUCTION
    answer_mode: str = "last-box"  # rewards.math.ANSWER_MODES
    grader: str = "ours"  # rewards.math.GRADERS (math task): ours or the paper's cascade
    task: str = "math"  # tasks.TASKS: prompt and verifier (docs/tasks.md)
    seed: int = 0
    p: float = 0.5
    K: int = 32
    device: str = "auto"
    junior_device: str | None = None
    dtype: str = "auto"
    batch_size: int = 64  # rows decoded together
    engine: str = "hf"
    vllm_settings: Any = None
    server: Any = None  # engines.server_client.ServerSettings (engine vllm-server)
    # handoff mode: "text" (turns re-tokenised per model, the paper's code; eval/text_handoff.py) or
    # "stream" (one token stream, one shared tokenizer); None = text for paragraph-* schedules, else stream
    protocol: str | None = None

    def __post_init__(self):
        from ..prompting import user_message
        from ..rewards.math import check_answer_mode

        if self.mode not in ("solo", "handoff"):
            raise TandemError(f"unknown evaluation mode {self.mode!r}; valid: solo, handoff")
        if self.n < 1:
            raise TandemError(f"n (samples per problem) must be >= 1, got {self.n}")
        check_seed(self.seed)
        check_p_K(self.p, self.K)
        if self.batch_size < 1 or (self.limit is not None and self.limit < 1):
            raise TandemError(f"batch size and limit must be >= 1, got {self.batch_size} and {self.limit}")
        if self.mode == "solo" and (self.junior is not None or self.junior_device is not None):
            raise TandemError("--junior/--junior-device have no effect on a solo evaluation (the senior samples "
                              "alone); use `tandem eval handoff` to sample with a junior")
        if self.mode == "handoff" and self.schedule == "senior":
            raise TandemError("--schedule senior hands nothing off (the junior would be ignored); use `tandem eval solo`")
        if self.protocol not in (None, "text", "stream"):
            raise TandemError(f"unknown handoff protocol {self.protocol!r}; valid: text, stream")
        if self.mode == "solo" and self.protocol is not None:
            raise TandemError("--protocol applies to `tandem eval handoff` only (a solo run has no handoff)")
        if self.handoff_protocol == "text" and not self.schedule.startswith("paragraph-"):
            raise TandemError(f"--protocol text hands off at paragraph breaks; schedule {self.schedule!r} needs "
                              "--protocol stream")
        check_answer_mode(self.answer_mode)
        from ..tasks import task_for_eval

        task_for_eval(self.task, instruction=self.instruction, answer_mode=self.answer_mode,
                      grader=self.grader)  # a bad name fails here
        user_message("", self.instruction)  # an unknown instruction name fails here, before any loading

    @property
    def handoff_protocol(self) -> str | None:
        """"text" or "stream" for a handoff run (the default by schedule), None for a solo run."""
        if self.mode == "solo":
            return None
        # text, the paper's protocol, for paragraph schedules on every engine (a run made under another default
        # resumes under the protocol it recorded: eval.sampler.as_recorded; docs/evaluation.md)
        return self.protocol or ("text" if self.schedule.startswith("paragraph-") else "stream")

    @property
    def schedule_name(self) -> str:
        """The schedule the decoder runs: ``senior`` for a solo evaluation."""
        return "senior" if self.mode == "solo" else self.schedule
