"""Reward terms: composable TRL reward functions, each logged on its own per step.

What: a run's reward is sum_i coef_i * term_i(response), built from specs ``NAME[:COEF]``
(``TrainConfig.reward_terms``; the default ``["correct"]`` is the paper's binary verifier
reward). Each term is one TRL reward function and its coefficient is TRL's reward weight, so
TRL logs each term's unweighted per-step mean and std as ``rewards/<NAME>/mean`` and
``rewards/<NAME>/std`` (its key for a reward function's ``__name__``) and their weighted sum
as ``reward`` (our log: ``reward/mean``). The terms:

- ``correct`` (coef 1): the task's correctness, ``Task.grade(...).score`` in [0, 1].
- ``length`` (coef 0.2): -min(tokens, ceiling) / ceiling, tokens = the completion's ids, EOS
  included; ceiling = ``length_ceiling`` or the run's ``max_new_tokens``. With ``correct`` it
  is the replication's R = correct - 0.2 * tokens / ceiling.
- ``format`` (coef 0.1): 1 if the response states its answer in the task's form, else 0: the
  task's own ``has_answer`` (a closed ``\\boxed{}``, ``#### x``, ``<answer>...</answer>``, a closed
  python or unlabelled code block for the built-in tasks).
- ``judge`` (coef 0.5): a judge model's verdict v in [0, 1] on each correct response
  (``rewards.judge``), 0 on incorrect ones. ``judge_mode`` multiply: the term is v x correct,
  so correct x (1 + coef x v): coef 0.5 is the replication's x1.5 for elegant correct
  solutions; add: the term is v wherever correct > 0 (a flat bonus coef). The same for binary
  correctness; they differ under partial credit. A judge failure is a zero for that response,
  counted in ``judge/failures`` (also ``judge/asked``, ``judge/cached``, ``judge/queried``,
  ``judge/mean_verdict``, through TRL's ``log_metric``).
- ``user`` (coef 1): the user's own function (``--reward module:function``, ``rewards.user``).

Registry: ``TERMS`` maps each name to a ``TermKind`` (default coefficient, builder, the words of
the run's model card), so a new term is its module plus one line there (``docs/contributing.md``);
``parse_terms``, ``build_terms`` and the model card all read that one table.

Checked: every call of every term (and of the user's function) goes through ``checked_call``: a
function that raises (``SystemExit`` too), or returns anything but one finite number (or None, TRL's
"no reward from this function") per completion, stops the run with a one-line ``TandemError`` naming
the function and the training step. Never a silent fix: TRL would take NaN as "no reward", let inf
zero the group's advantages and turn numeric strings into numbers (docs/tasks.md, "Reward checks").

Rows: TRL passes the dataset's columns to every reward function; ``task_row`` (JSON) holds the
task's own row (gold answer, tests), so ``correct`` and ``judge`` can call ``Task.grade``.
Grades are memoised for the batch, so ``judge`` and ``format`` never re-run a verifier (a code
task's tests run once per response).
"""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import TandemError
from .judge import JudgeStats

JUDGE_MODES = ("multiply", "add")


@dataclass(frozen=True)
class TermSpec:
    name: str
    coef: float

    def __str__(self) -> str:
        return f"{self.name}:{self.coef:g}"


def parse_terms(specs: Any) -> list[TermSpec]:
    """Term specs from a list (YAML) or a comma-separated string (CLI) of ``NAME[:COEF]``."""
    items = specs.split(",") if isinstance(specs, str) else specs
    if not isinstance(items, (list, tuple)) or not items:
        raise TandemError(f"reward_terms must be a non-empty list of NAME[:COEF] specs, got {specs!r}")
    out = []
    for item in items:
        name, _, coef = str(item).strip().partition(":")
        if name not in TERMS:
            raise TandemError(f"unknown reward term {name!r} in {item!r}; valid: {', '.join(TERMS)}")
        try:
            value = float(coef) if coef else TERMS[name].coef
        except ValueError:
            raise TandemError(f"reward term {item!r}: coefficient {coef!r} is not a number") from None
        if value != value or abs(value) == float("inf"):
            raise TandemError(f"reward term {item!r}: coefficient must be finite")
        if any(t.name == name for t in out):
            raise TandemError(f"reward term {name!r} given twice in {specs!r}")
        out.append(TermSpec(name, value))
    return out


def _step(kwargs: dict) -> str:
    """The training step a reward call scores for (TRL's ``trainer_state`` counts the updates done)."""
    state = kwargs.get("trainer_state")
    return f"training step {state.global_step + 1}" if state is not None else "this call"


def check_rewards(out, n: int, label: str, step: str) -> list:
    """``out`` as n floats (None kept), or a TandemError naming ``label`` and ``step``: a list, tuple or
    1-D array of finite real numbers or None; never a string coerced, a generator, a scalar or NaN/inf."""
    if hasattr(out, "tolist") and not isinstance(out, (list, tuple)):
        out = out.tolist()  # a numpy array or torch tensor
    if not isinstance(out, (list, tuple)):
        raise TandemError(f"{label} returned {type(out).__name__} at {step}, not a list of one reward per completion")
    if len(out) != n:
        raise TandemError(f"{label} returned {len(out)} rewards for {n} completions at {step}")
    for i, v in enumerate(out):
        if v is not None and not (isinstance(v, numbers.Real) and math.isfinite(v)):
            raise TandemError(f"{label} returned {v!r} ({type(v).__name__}) for completion {i} at {step}; each "
                              "reward must be a finite number (or None: no reward from this function)")
    return [None if v is None else float(v) for v in out]


def checked_call(fn, label: str, prompts, completions, kwargs: dict) -> list:
    """``fn``'s rewards for the batch, through ``check_rewards``; an exception (``SystemExit`` too, so a
    reward function cannot end the run silently) becomes a one-line TandemError naming ``label`` and the step."""
    step = _step(kwargs)
    try:
        out = fn(prompts=prompts, completions=completions, **kwargs)
    except TandemError as e:
        raise TandemError(f"{label} at {step}: {e}") from None
    except (Exception, SystemExit) as e:
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise TandemError(f"{label} raised {type(e).__name__}{': ' + first if first else ''} at {step}") from None
    return check_rewards(out, len(completions), label, step)


class Checked:
    """A registered term as TRL calls it: through ``checked_call``, under its registry name as ``__name__``
    (TRL's log key), whatever the function itself is called."""

    def __init__(self, term, name: str):
        self.term, self.name = term, name

    @property
    def __name__(self) -> str:  # noqa: A003 (TRL's get_callable_name reads it)
        return self.name

    def __call__(self, prompts, completions, **kwargs) -> list:
        return checked_call(self.term, f"reward term {self.name}", prompts, completions, kwargs)


def completion_text(c) -> str:
    """A TRL completion as text (a string, or a conversation whose last message is the reply)."""
    return c if isinstance(c, str) else c[-1]["content"]


class Grades:
    """The task's grades of the current batch, keyed by (row, response): one verifier run each."""

    def __init__(self, task):
        self.task = task
        self._memo: dict[tuple[str, str], Any] = {}

    def __call__(self, texts: list[str], rows_json: list[str]) -> list:
        keys = list(zip(rows_json, texts, strict=True))
        if len(self._memo) > 4 * len(keys):  # bound the memo: keep only the batch at hand's grades
            self._memo = {k: self._memo[k] for k in keys if k in self._memo}
        todo = [i for i, k in enumerate(keys) if k not in self._memo]
        if todo:
            grades = self.task.grade([texts[i] for i in todo], [json.loads(rows_json[i]) for i in todo])
            self._memo.update({keys[i]: g for i, g in zip(todo, grades, strict=True)})
        return [self._memo[k] for k in keys]


def _rows(kwargs: dict, n: int) -> list[str]:
    rows = kwargs.get("task_row")
    if rows is None or len(rows) != n:
        raise TandemError("reward terms need the dataset's task_row column (one JSON row per completion)")
    return list(rows)


class CorrectTerm:
    """The task's correctness (``Grade.score``); logs the mean pass fraction where grades carry one."""

    def __init__(self, grades: Grades):
        self.grades = grades

    def __call__(self, prompts, completions, **kwargs) -> list[float]:
        texts = [completion_text(c) for c in completions]
        grades = self.grades(texts, _rows(kwargs, len(texts)))
        fractions = [g.details["pass_fraction"] for g in grades if "pass_fraction" in (g.details or {})]
        if fractions and kwargs.get("log_metric"):
            kwargs["log_metric"]("correct/pass_fraction", sum(fractions) / len(fractions))
        return [float(g.score) for g in grades]


class LengthTerm:
    """-min(tokens, ceiling) / ceiling of each completion."""

    def __init__(self, ceiling: int):
        if ceiling < 1:
            raise TandemError(f"length_ceiling must be >= 1, got {ceiling}")
        self.ceiling = ceiling

    def __call__(self, prompts, completions, completion_ids=None, **kwargs) -> list[float]:
        if completion_ids is None:
            raise TandemError("the length term needs the completions' token ids")
        return [-min(len(ids), self.ceiling) / self.ceiling for ids in completion_ids]


class FormatTerm:
    """1 where the response states an answer in the task's form (``Task.has_answer``), else 0."""

    def __init__(self, task):
        self.check = getattr(task, "has_answer", None)
        if not callable(self.check):  # a task put into TASKS without register_task's check
            raise TandemError(f"task {task.name!r} lacks has_answer (the format term's answer form; tandem_rlvr.tasks)")

    def __call__(self, prompts, completions, **kwargs) -> list[float]:
        return [float(bool(self.check(completion_text(c)))) for c in completions]


class JudgeTerm:
    """The judge's verdict on each correct response (``judge_mode``: times the score, or flat), 0 elsewhere."""

    def __init__(self, judge, grades: Grades, mode: str = "multiply"):
        if mode not in JUDGE_MODES:
            raise TandemError(f"unknown judge_mode {mode!r}; valid: {', '.join(JUDGE_MODES)}")
        self.judge, self.grades, self.mode = judge, grades, mode

    def __call__(self, prompts, completions, **kwargs) -> list[float]:
        texts = [completion_text(c) for c in completions]
        rows_json = _rows(kwargs, len(texts))
        scores = [float(g.score) for g in self.grades(texts, rows_json)]
        judged = [i for i, s in enumerate(scores) if s > 0]
        items = []
        for i in judged:
            row = json.loads(rows_json[i])
            question = str(row.get("question", completion_text(prompts[i]) if prompts else ""))
            items.append((question, texts[i], str(row.get("gold", row.get("answer", "")))))
        verdicts, stats = self.judge.verdicts(items) if items else ([], JudgeStats())
        out = [0.0] * len(texts)
        for i, v in zip(judged, verdicts, strict=True):
            out[i] = 0.0 if v is None else v * (scores[i] if self.mode == "multiply" else 1.0)
        log_metric = kwargs.get("log_metric")
        if log_metric:  # every step logs the counters (zeros when no response was correct)
            for key in ("asked", "cached", "queried", "failed"):
                log_metric(f"judge/{'failures' if key == 'failed' else key}", float(getattr(stats, key)))
            ok = [v for v in verdicts if v is not None]
            if ok:
                log_metric("judge/mean_verdict", sum(ok) / len(ok))
        return out


@dataclass(frozen=True)
class TermContext:
    """What a term may be built from: the run's task, the batch's memoised grades (``Grades``), the length
    ceiling, the judge (``rewards.judge.Judge`` or None), the judge mode and the user's function (or None)."""

    task: Any
    grades: Grades
    ceiling: int
    judge: Any = None
    judge_mode: str = "multiply"
    user: Any = None


@dataclass(frozen=True)
class TermKind:
    """One row of the reward-term registry ``TERMS``.

    coef: the coefficient of ``NAME`` without ``:COEF``; build: ``TermContext -> reward function``
    (TRL's convention, ``fn(prompts, completions, **columns) -> [float | None]``); describe: the run's
    config -> the term in words, for the model card (``rl.train.model_card``); checked: the built function
    is wrapped in ``checked_call`` (the user's function checks its own calls); about: the term in a few
    words, for the help of ``reward_terms`` (``terms_help``)."""

    coef: float
    build: Callable[[TermContext], Callable]
    describe: Callable[[Any], str]
    checked: bool = True
    about: str = ""


def _judge(ctx: TermContext):
    if ctx.judge is None:
        raise TandemError("reward term 'judge' needs a judge model: set judge (a model or an http(s) URL)")
    return JudgeTerm(ctx.judge, ctx.grades, ctx.judge_mode)


def _user(ctx: TermContext):
    if ctx.user is None:
        raise TandemError("reward term 'user' needs a reward function: set reward (module:function)")
    return ctx.user  # a rewards.user.UserReward checks its own calls


# name -> TermKind: the one table of reward terms (a new term is a module and one line here)
TERMS: dict[str, TermKind] = {
    "correct": TermKind(1.0, lambda ctx: CorrectTerm(ctx.grades), lambda cfg: "correctness" + (
        " (binary verifier on the last \\boxed{} answer)" if cfg.data.task == "math" else ""),
        about="the task's correctness"),
    "length": TermKind(0.2, lambda ctx: LengthTerm(ctx.ceiling),
                       lambda cfg: f"length penalty -tokens/{cfg.length_ceiling_tokens}",
                       about="-tokens/ceiling, EOS counted"),
    "format": TermKind(0.1, lambda ctx: FormatTerm(ctx.task), lambda cfg: "answer-format bonus",
                       about="answer in the task's form"),
    "judge": TermKind(0.5, _judge,
                      lambda cfg: f"judge bonus ({cfg.rewards.judge_mode}; judge `{cfg.rewards.judge}`, template "
                                  f"`{cfg.rewards.judge_template}`, parser `{cfg.rewards.judge_parser}`)",
                      about="judge verdict on correct responses"),
    "user": TermKind(1.0, _user, lambda cfg: f"`{cfg.rewards.reward}`", checked=False, about="--reward's function"),
}


def register_reward_term(name: str, kind: TermKind, *, overwrite: bool = False) -> TermKind:
    """Add a reward term ``name`` (a ``TermKind`` row) to ``TERMS``, usable in ``reward_terms`` as ``name[:COEF]``;
    an existing name is an error unless ``overwrite``."""
    if not isinstance(name, str) or not name.isidentifier():
        raise TandemError(f"reward term name must be an identifier, got {name!r}")
    if name in TERMS and not overwrite:
        raise TandemError(f"reward term {name!r} is already registered")
    TERMS[name] = kind
    return kind


def terms_help() -> str:
    """``NAME (about, coef C)`` of every registered term, for the help of ``reward_terms``."""
    return ", ".join(f"{name} ({k.about + ', ' if k.about else ''}coef {k.coef:g})" for name, k in TERMS.items())


def describe_terms(cfg) -> str:
    """The reward of a run (``cfg.reward_terms``, canonical ``NAME:COEF`` specs) in words, each term's from
    its own registry row: ``coef x words`` joined by ``+`` (coefficient 1 left out)."""
    parts = []
    for spec in parse_terms(cfg.rewards.reward_terms):
        words = TERMS[spec.name].describe(cfg)
        parts.append(f"{spec.coef:g} x {words}" if spec.coef != 1 else words)
    return " + ".join(parts)


def build_terms(specs: list[TermSpec], task, *, ceiling: int, judge=None, judge_mode: str = "multiply",
                user=None) -> tuple[list, list[float]]:
    """(TRL reward functions, their weights) for ``specs`` on ``task``, each from its ``TERMS`` row.

    judge: a ``rewards.judge.Judge`` (needed by a ``judge`` term); user: the user's reward
    function (needed by a ``user`` term, ``rewards.user.load_reward``).
    """
    ctx = TermContext(task, Grades(task), ceiling, judge, judge_mode, user)
    funcs = []
    for s in specs:
        kind = TERMS[s.name]
        fn = kind.build(ctx)
        funcs.append(Checked(fn, s.name) if kind.checked else fn)
    return funcs, [s.coef for s in specs]
