"""``EvalConfig``: one ``tandem eval solo|handoff`` run (``eval.sampler.evaluate``), built once, passed whole.

Made of three frozen parts: ``models`` (senior, junior, devices, dtype), ``decoding`` (sampling, engine,
p, K, seed, batch size, engine settings) and ``problems`` (benchmarks, prompts, answer mode, grader,
task), plus what the evaluation is (mode, schedule, protocol, samples per problem). Derived once, where
built: ``problems.run_task`` (the task that prompts and grades), ``engine_setup`` and ``rollout_spec``
(what ``engines.open_decoder`` opens). Built from its flat keys (``EvalConfig.from_keys(senior=...,
n=8)``, the flags' names); ``to_dict`` gives them back.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, is_dataclass
from functools import cached_property
from typing import Any, Sequence

from ..decoding.sampling import SamplingParams
from ..decoding.schedule import check_p_K, schedule_kind
from ..errors import TandemError
from ..prompting import DEFAULT_INSTRUCTION
from .fields import check_seed


def paper_eval_sampling() -> SamplingParams:
    """The paper's evaluation sampling: temperature 0.7, top-p 0.8, top-k 20, 3000 new tokens."""
    return SamplingParams(0.7, 0.8, 20, 3000)


@dataclass(frozen=True)
class EvalModels:
    """The senior and the junior (default: the senior's checkpoint), their devices and dtype.

    ``junior`` may name a pool (``A,B,C``, ``A:0.5,B:0.5``, a YAML list; ``pool.JuniorPool``): each sample
    draws its junior (docs/evaluation.md, "a junior pool"). A one-junior pool (``A:1``, a list of one) is
    stored as its one name, so it is today's evaluation exactly."""

    senior: str = "tiny"
    junior: str | None = None
    device: str = "auto"
    junior_device: str | None = None
    dtype: str = "auto"

    def __post_init__(self):
        if self.junior is not None and self.pool.single:
            object.__setattr__(self, "junior", self.pool.names[0])

    @property
    def pool(self):
        """The junior pool (``pool.JuniorPool``) of ``junior``; None where no junior is given."""
        from ..pool import JuniorPool

        return None if self.junior is None else JuniorPool.parse(self.junior)


@dataclass(frozen=True)
class EvalDecoding:
    """How samples are drawn: sampling, schedule knobs, seed, rows decoded together, the engine and its settings."""

    sampling: SamplingParams = field(default_factory=paper_eval_sampling)
    p: float = 0.5
    K: int = 32
    seed: int = 0
    batch_size: int = 64  # rows decoded together
    engine: str = "hf"  # engines.ENGINES: hf (our decoder, the reference), vllm, vllm-server
    vllm_settings: Any = None  # engines.vllm_engine.VLLMSettings
    server: Any = None  # engines.server_client.ServerSettings (engine vllm-server)

    def __post_init__(self):
        check_seed(self.seed)
        check_p_K(self.p, self.K)
        if self.batch_size < 1:
            raise TandemError(f"batch size must be >= 1, got {self.batch_size}")


@dataclass(frozen=True)
class EvalProblems:
    """Which problems, how they are prompted and graded. Defaults: the paper's instruction and last-box grading."""

    benchmarks: Sequence[str] = ("tiny",)
    split: str | None = None
    limit: int | None = None  # first N problems of each benchmark
    template: str = "auto"
    instruction: str = DEFAULT_INSTRUCTION
    answer_mode: str = "last-box"  # rewards.math.ANSWER_MODES
    grader: str = "ours"  # rewards.math.GRADERS (math task): ours or the paper's cascade
    task: str = "math"  # tasks.TASKS: prompt and verifier (docs/tasks.md)

    def __post_init__(self):
        from ..prompting import user_message
        from ..rewards.math import check_answer_mode

        if self.limit is not None and self.limit < 1:
            raise TandemError(f"limit must be >= 1, got {self.limit}")
        check_answer_mode(self.answer_mode)
        self.run_task  # a bad task name, or an answer mode or grader it does not take, fails here
        user_message("", self.instruction)  # an unknown instruction name fails here, before any loading

    @cached_property
    def run_task(self):
        """The ``tasks.Task`` that prompts and grades this evaluation."""
        from ..tasks import task_for_eval

        return task_for_eval(self.task, instruction=self.instruction, answer_mode=self.answer_mode, grader=self.grader)


EVAL_PARTS = {"models": EvalModels, "decoding": EvalDecoding, "problems": EvalProblems}


@dataclass(frozen=True)
class EvalConfig:
    """One evaluation run. mode "solo" samples the senior alone; "handoff" uses ``schedule`` with the junior."""

    mode: str = "solo"
    schedule: str = "paragraph-roundrobin"  # handoff mode only
    n: int = 8  # samples per problem
    # handoff mode: "text" (turns re-tokenised per model, the paper's code; eval/text_handoff.py) or
    # "stream" (one token stream, one shared tokenizer); None = text for schedules with text turns, else stream
    protocol: str | None = None
    models: EvalModels = field(default_factory=EvalModels)
    decoding: EvalDecoding = field(default_factory=EvalDecoding)
    problems: EvalProblems = field(default_factory=EvalProblems)

    def __post_init__(self):
        m = self.models
        if self.mode not in ("solo", "handoff"):
            raise TandemError(f"unknown evaluation mode {self.mode!r}; valid: solo, handoff")
        if self.n < 1:
            raise TandemError(f"n (samples per problem) must be >= 1, got {self.n}")
        if self.mode == "solo" and (m.junior is not None or m.junior_device is not None):
            raise TandemError("--junior/--junior-device have no effect on a solo evaluation (the senior samples "
                              "alone); use `tandem eval handoff` to sample with a junior")
        if self.mode == "handoff" and self.schedule == "senior":
            raise TandemError("--schedule senior hands nothing off (the junior would be ignored); use `tandem eval solo`")
        if self.protocol not in (None, "text", "stream"):
            raise TandemError(f"unknown handoff protocol {self.protocol!r}; valid: text, stream")
        if self.mode == "solo" and self.protocol is not None:
            raise TandemError("--protocol applies to `tandem eval handoff` only (a solo run has no handoff)")
        if self.handoff_protocol == "text" and not schedule_kind(self.schedule).text_turns:
            raise TandemError(f"--protocol text hands off at paragraph breaks; schedule {self.schedule!r} needs "
                              "--protocol stream")

    @classmethod
    def from_keys(cls, **keys) -> "EvalConfig":
        """The evaluation of these keys (``eval_keys()``; the rest at their defaults)."""
        where = {f.name: name for name, part in EVAL_PARTS.items() for f in fields(part)}
        own = {f.name for f in fields(cls)} - set(EVAL_PARTS)
        unknown = [k for k in keys if k not in where and k not in own]
        if unknown:
            raise TandemError(f"unknown evaluation key {unknown[0]!r}")
        parts = {name: part(**{k: v for k, v in keys.items() if where.get(k) == name}) for name, part in EVAL_PARTS.items()}
        return cls(**{k: v for k, v in keys.items() if k in own}, **parts)

    def keys(self) -> dict:
        """Every key with its value, as given (``from_keys(**cfg.keys())`` is ``cfg``)."""
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in EVAL_PARTS}
        return {**own, **{f.name: getattr(getattr(self, name), f.name) for name, part in EVAL_PARTS.items()
                          for f in fields(part)}}

    def to_dict(self) -> dict:
        """``keys()`` with the settings objects (sampling, engine settings) as dicts."""
        return {k: asdict(v) if is_dataclass(v) else v for k, v in self.keys().items()}

    def with_keys(self, **keys) -> "EvalConfig":
        """A copy with these keys changed, checked as a new evaluation."""
        return EvalConfig.from_keys(**{**self.keys(), **keys})

    @property
    def handoff_protocol(self) -> str | None:
        """"text" or "stream" for a handoff run (the default by schedule), None for a solo run."""
        if self.mode == "solo":
            return None
        # text, the paper's protocol, for schedules with text turns on every engine (a run made under another default
        # resumes under the protocol it recorded: eval.sampler.as_recorded; docs/evaluation.md)
        return self.protocol or ("text" if schedule_kind(self.schedule).text_turns else "stream")

    @property
    def schedule_name(self) -> str:
        """The schedule the decoder runs: ``senior`` for a solo evaluation."""
        return "senior" if self.mode == "solo" else self.schedule

    @property
    def junior_spec(self) -> str | None:
        """The junior's checkpoint the decoder loads: None for a solo run, else the junior or the senior's
        (a pool of several juniors: its spec, ``pool.JuniorPool.parse`` reads it back)."""
        return None if self.schedule_name == "senior" else (self.models.junior or self.models.senior)

    @property
    def pool(self):
        """The junior pool of a handoff run with several juniors (``pool.JuniorPool``), else None."""
        pool = self.models.pool if self.schedule_name != "senior" else None
        return None if pool is None or pool.single else pool

    @property
    def model_roles(self) -> dict[str, str]:
        """{role: checkpoint} of every model the run samples with, fingerprinted into config.json:
        "senior", and "junior" (one junior) or "junior/NAME" per junior of a pool."""
        if self.junior_spec is None:
            return {"senior": self.models.senior}
        if self.pool is None:
            return {"senior": self.models.senior, "junior": self.junior_spec}
        return {"senior": self.models.senior, **{f"junior/{n}": n for n in self.pool.names}}

    @cached_property
    def engine_setup(self):
        """What ``engines.open_decoder`` opens for this evaluation (``engines.base.EngineSetup``)."""
        from ..engines.base import EngineSetup

        m, d = self.models, self.decoding
        return EngineSetup(m.senior, self.junior_spec, m.device, m.junior_device, m.dtype, d.seed, d.vllm_settings,
                           d.server)

    @cached_property
    def rollout_spec(self):
        """The schedule and sampling the decoder draws with (``engines.base.RolloutSpec``)."""
        from ..engines.base import RolloutSpec

        d = self.decoding
        return RolloutSpec(self.schedule_name, d.sampling, d.p, d.K)


def eval_keys() -> list[str]:
    """Every key of an ``EvalConfig`` (the flags of ``tandem eval solo|handoff``)."""
    return list(EvalConfig().keys())
