"""``EvalConfig``: one ``tandem eval solo|handoff`` run (``eval.sampler.evaluate``), built once, passed whole.

Made of three frozen parts: ``models`` (senior, junior, devices, dtype), ``decoding`` (sampling, engine,
p, K, seed, batch size, engine settings) and ``problems`` (benchmarks, prompts, answer mode, grader,
task), plus what the evaluation is (mode, schedule, protocol, samples per problem). Derived once, where
built: ``problems.run_task`` (the task that prompts and grades), ``engine_setup`` and ``rollout_spec``
(what ``engines.open_decoder`` opens). Built from its flat keys (``EvalConfig.from_keys(senior=...,
n=8)``, the flags' names); ``to_dict`` gives them back.

Each setting is one ``fields.setting`` line with its help, choices and range: ``tandem eval solo|handoff``
makes its flags from them (``cli/eval.py``), and every part checks each value's type, range and choice
when it is built (``check_types``, then ``fields.check_part``), so a wrong type from Python or from a
recorded config.json is one line naming the setting, never a later ``TypeError``.
"""

from __future__ import annotations

from dataclasses import Field, asdict, dataclass, field, fields, is_dataclass
from functools import cached_property
from typing import Any, Sequence

from ..decoding.sampling import SamplingParams
from ..decoding.schedule import SCHEDULES, check_p_K, schedule_help, schedule_kind
from ..engines.base import DEFAULT_ENGINE, ENGINES, engine_help
from ..errors import TandemError
from ..prompting import DEFAULT_INSTRUCTION, INSTRUCTIONS
from ..rewards.math import ANSWER_MODES, GRADERS
from .data import task_names
from .fields import SEED_MAX, check_part, kind, optional, setting

HANDOFF = {"mode": "handoff"}  # metadata of the settings only a handoff evaluation has (its flags too)
SHARED_FLAG = {"flag": "shared"}  # given by a flag group shared with other commands (cli/flags.py), not generated
MODES = ("solo", "handoff")
PROTOCOLS = ("text", "stream")


def check_types(part) -> None:
    """Every ``str``, ``bool`` and ``Sequence[str]`` field of ``part`` of its type (None where the field is
    optional); ``fields.check_part`` checks the numbers and choices after it. A TandemError names the setting."""
    for f in fields(part):
        value, want = getattr(part, f.name), kind(f)
        if value is None and optional(f):
            continue
        if want == "str":
            ok = isinstance(value, str)
        elif want == "bool":
            ok = isinstance(value, bool)
        elif want == "Sequence[str]":
            ok = isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
            want = "a list of strings"
        else:
            continue
        if not ok:
            raise TandemError(f"{f.name} must be {'a string' if want == 'str' else want}"
                              f"{' or None' if optional(f) else ''}, got {type(value).__name__} {value!r}")

def paper_eval_sampling() -> SamplingParams:
    """The paper's evaluation sampling: temperature 0.7, top-p 0.8, top-k 20, 3000 new tokens."""
    return SamplingParams(0.7, 0.8, 20, 3000)


@dataclass(frozen=True)
class EvalModels:
    """The senior and the junior (default: the senior's checkpoint), their devices and dtype.

    ``junior`` may name a pool (``A,B,C``, ``A:0.5,B:0.5``, a YAML list; ``pool.JuniorPool``): each sample
    draws its junior (docs/evaluation.md, "a junior pool"). A one-junior pool (``A:1``, a list of one) is
    stored as its one name, so it is today's evaluation exactly."""

    senior: str = setting("tiny", "senior: directory, .gguf file, hub id, or a built-in name (tiny = the tiny world's "
                          "base model)")
    junior: str | None = setting(None, "junior (frozen), same tokenizer as the senior (--protocol text: any "
                                 "tokenizer); A,B or A:0.5,B:0.5 = a junior pool. Default: the junior of the senior's "
                                 "training run when the senior is a checkpoint of one (its config.json), else required",
                                 **HANDOFF)
    device: str = setting("auto", "device of the senior: auto, cpu, cuda:0, ...")
    junior_device: str | None = setting(None, "device of the junior (default: the senior's)", **HANDOFF)
    dtype: str = setting("auto", "float32, bfloat16, float16 or auto (bf16 on CUDA, else fp32)")

    def __post_init__(self):
        check_types(self)
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

    sampling: SamplingParams = field(default_factory=paper_eval_sampling, metadata={
        "help": "temperature, top-p, top-k, max new tokens (paper: 0.7, 0.8, 20, 3000)", **SHARED_FLAG})
    p: float = setting(0.5, "probability that the senior writes after a redraw", range=(0, 1, False), **HANDOFF)
    K: int = setting(32, "word schedules: tokens before a forced redraw; chunk, chunk-word: tokens or words per chunk",
                     range=(1, None, False), **HANDOFF)
    seed: int = setting(0, "base of every row's seed", range=(0, SEED_MAX, False))
    batch_size: int = setting(64, "rows decoded together (vllm: rows handed to the engine at once; finished problems "
                              "are saved after each batch)", range=(1, None, False))
    engine: str = setting(DEFAULT_ENGINE, "the engine that samples", choices=ENGINES.keys(),
                          names=lambda: engine_help(), **SHARED_FLAG)
    vllm_settings: Any = field(default=None, metadata={"help": "engine vllm: the --vllm-* settings "
                                                       "(engines.vllm_engine.VLLMSettings)", **SHARED_FLAG})
    server: Any = field(default=None, metadata={"help": "engine vllm-server: the --server* settings "
                                                "(engines.server_client.ServerSettings)", **SHARED_FLAG})

    def __post_init__(self):
        check_types(self)
        check_part(self)
        if not isinstance(self.sampling, SamplingParams):
            raise TandemError(f"sampling must be SamplingParams, got {type(self.sampling).__name__}")
        check_p_K(self.p, self.K)


@dataclass(frozen=True)
class EvalProblems:
    """Which problems, how they are prompted and graded. Defaults: the paper's instruction and last-box grading."""

    benchmarks: Sequence[str] = setting(("tiny",), "benchmark names, files or hub ids (flag: comma-separated)")
    split: str | None = setting(None, "split for registered/hub benchmarks (tiny: test)")
    limit: int | None = setting(None, "first N problems of each benchmark", range=(1, None, False))
    template: str = setting("auto", "prompt template: auto, plain, chat")
    instruction: str = setting(DEFAULT_INSTRUCTION, "instruction after the problem in chat prompts (paper: the "
                               "paper's)", choices=tuple(INSTRUCTIONS))
    answer_mode: str = setting(ANSWER_MODES[0], "graded answer: last-box (the paper's) or final-boxes (the final run "
                               "of boxes joined, for multi-answer problems answered one box per answer)",
                               choices=ANSWER_MODES)
    grader: str = setting("ours", "math grader: ours (math-verify with repairs, choice labels stripped) or paper (the "
                          "paper's cascade: mathd, sympy, math-verify; docs/paper_fidelity.md)", choices=GRADERS)
    task: str = setting("math", "what is asked and how it is graded (docs/tasks.md); recorded as the run's verifier",
                        names=lambda: task_names())

    def __post_init__(self):
        from ..prompting import user_message

        check_types(self)
        check_part(self)
        _ = self.run_task  # a bad task name, or an answer mode or grader it does not take, fails here
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

    mode: str = setting("solo", "solo (the senior alone) or handoff (with the junior)", choices=MODES, flag="command")
    schedule: str = setting("paragraph-roundrobin", "who writes each token", choices=SCHEDULES,
                            names=lambda: schedule_help(), **HANDOFF)
    n: int = setting(8, "samples per problem", range=(1, None, False))
    protocol: str | None = setting(None, "text: turns end at a paragraph break and the text is re-tokenised for the "
                                   "other model (the paper's eval/handoff.py; any junior, its own tokenizer and "
                                   "template); stream: one token stream, authors switch inside it (one shared "
                                   "tokenizer). Default: text for schedules with paragraph turns "
                                   "(paragraph-roundrobin, paragraph-bernoulli) on every engine (a resumed run keeps "
                                   "the protocol it was made with), else stream", choices=PROTOCOLS, **HANDOFF)
    models: EvalModels = field(default_factory=EvalModels)
    decoding: EvalDecoding = field(default_factory=EvalDecoding)
    problems: EvalProblems = field(default_factory=EvalProblems)

    def __post_init__(self):
        m = self.models
        check_types(self)
        check_part(self)
        if self.mode == "solo" and (m.junior is not None or m.junior_device is not None):
            raise TandemError("--junior/--junior-device have no effect on a solo evaluation (the senior samples "
                              "alone); use `tandem eval handoff` to sample with a junior")
        if self.mode == "handoff" and self.schedule == "senior":
            raise TandemError("--schedule senior hands nothing off (the junior would be ignored); "
                              "use `tandem eval solo`")
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
        parts = {name: part(**{k: v for k, v in keys.items() if where.get(k) == name})
                 for name, part in EVAL_PARTS.items()}
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


def eval_fields() -> list[tuple[str, Field]]:
    """(part, field) of every setting in ``keys()`` order; part "evaluation" for the config's own settings."""
    own = [("evaluation", f) for f in fields(EvalConfig) if f.name not in EVAL_PARTS]
    return own + [(name, f) for name, part in EVAL_PARTS.items() for f in fields(part)]
