"""Tasks: what a model is asked (loader, prompt) and how its answer is graded (verifier), one registry.

A task is a plug-in with four parts (the ``Task`` protocol):

- ``name`` ("math", "gsm8k", "answer-tag", "code") and ``verifier``, the identifier recorded in
  every run config and eval result (the task's name, its grader's version and its options, e.g.
  ``math@1:last-box``); ``tandem compare`` refuses to put runs of different verifiers in one table;
- ``load(benchmark, limit, split=None) -> rows``: dicts with at least ``benchmark``, ``problem_id``,
  ``question`` (the problem as shown to the model) and ``gold`` (what the verifier checks against:
  an answer string, or for code a description of the tests), plus whatever else the task needs;
- ``prompt(row) -> str``: the user message of the chat (the chat template is applied by the caller);
- ``grade(responses, rows) -> [Grade]``: batched; a ``Grade`` is the task's correctness reward in
  [0, 1] (binary for every built-in task), a short reason and details (``pass_fraction`` for code);
- ``has_answer(response) -> bool``: the response states an answer in the task's form, right or
  wrong (the ``format`` reward term).

``register_task`` checks all five when a task is registered (a missing one is a one-line error
naming it), so a task that would fail later, at a reward term, is refused at its registration.

Built in (``TASKS``; conventions in ``docs/tasks.md``): ``math`` (``tasks.answers.MathTask``, the
paper's last-``\\boxed{}`` verifier of ``rewards.math`` unchanged), ``gsm8k`` (``####`` answer, else
the last number), ``answer-tag`` (exact match inside the last ``<answer>...</answer>``, normalised)
and ``code`` (``tasks.code.CodeTask``: programs run against unit tests in ``tandem_rlvr.sandbox``).

Where runs use it: ``tandem eval solo|handoff --task T`` (``eval.sample.sampler``) and ``tandem grade``
(``tasks.grade``). ``load_problems`` turns a task's rows into the ``data.benchmarks.Problem``
records the evaluation layer fingerprints and samples from.
"""

from __future__ import annotations

import json
from typing import Sequence

from ..errors import TandemError
from ..io import lone_surrogate
from .base import Grade, Task


TASKS: dict[str, Task] = {}
_METHODS = ("load", "prompt", "grade", "has_answer")


def register_task(task: Task) -> Task:
    """Add ``task`` to ``TASKS`` under ``task.name``; a TandemError names what it lacks (a string ``name``
    and ``verifier``; callable ``load``, ``prompt``, ``grade``, ``has_answer``) or the name taken."""
    name = getattr(task, "name", None)
    if not isinstance(name, str) or not name or not isinstance(getattr(task, "verifier", None), str):
        raise TandemError(f"task {task!r} needs a string name and verifier")
    missing = [m for m in _METHODS if not callable(getattr(task, m, None))]
    if missing:
        raise TandemError(f"task {name!r} lacks {', '.join(missing)} (the Task protocol, tandem_rlvr.tasks)")
    if name in TASKS and TASKS[name] is not task:
        raise TandemError(f"task {name!r} is already registered")
    TASKS[name] = task
    return task


def _register_builtin() -> None:
    from .answers import AnswerTagTask, Gsm8kTask, MathTask
    from .code import CodeTask

    for task in (MathTask(), Gsm8kTask(), AnswerTagTask(), CodeTask()):
        register_task(task)


_register_builtin()


def get_task(name: str) -> Task:
    """The task registered as ``name``; a ``TandemError`` lists the valid names otherwise."""
    try:
        return TASKS[name]
    except (KeyError, TypeError):
        raise TandemError(f"unknown task {name!r}; valid: {', '.join(sorted(TASKS))}") from None


def task_for_eval(name: str, *, instruction: str, answer_mode: str, grader: str = "ours") -> Task:
    """The task an evaluation runs: ``math`` takes the eval's instruction, answer mode and grader
    (``rewards.math.GRADERS``); the other tasks have their own prompt and grader, so a non-default
    answer mode or grader for them is an error."""
    from dataclasses import replace

    from ..rewards.math import ANSWER_MODES, GRADERS, check_answer_mode, check_grader

    task = get_task(name)
    if name == "math":
        return replace(task, instruction=instruction, answer_mode=check_answer_mode(answer_mode),
                       grader=check_grader(grader, answer_mode))
    if answer_mode != ANSWER_MODES[0] or grader != GRADERS[0]:
        option = f"--answer-mode {answer_mode}" if answer_mode != ANSWER_MODES[0] else f"--grader {grader}"
        raise TandemError(f"{option} applies to the math task only (task {name} has its own grader)")
    return task


def task_row(problem) -> dict:
    """The task row of a ``Problem``: its loader's row (``meta``) with the fingerprinted fields on top."""
    p = problem
    return {**p.meta, "benchmark": p.benchmark, "problem_id": str(p.problem_id), "question": p.problem,
            "gold": p.answer, "solution": p.solution}


def prompt_text(tokenizer, task: Task, problem, template: str) -> str:
    """The prompt of a ``Problem``: the task's user message in the chat template; under ``plain``, the
    bare problem and a blank line (the tiny worlds' format), whatever the task."""
    from ..prompting import format_prompt

    if template == "plain":
        return format_prompt(tokenizer, problem.problem, template)
    return format_prompt(tokenizer, task.prompt(task_row(problem)), template, "none")


def gold_text(gold) -> str:
    """A row's gold as text (what a ``Problem`` records and fingerprints): strings as they are, else JSON."""
    return gold if isinstance(gold, str) else json.dumps(gold, sort_keys=True)


def load_problems(task: Task, specs: Sequence[str], *, split: str | None = None,
                  limit: int | None = None) -> dict:
    """``{benchmark: [Problem]}`` of ``task``'s rows for each spec; a row rides along as ``Problem.meta``.

    ``Problem.problem`` is the row's question and ``Problem.answer`` its gold as text, so a problem's
    fingerprint covers exactly what the model sees and what it is graded against.
    """
    from ..data.benchmarks import Problem

    out: dict[str, list[Problem]] = {}
    for spec in specs:
        rows = task.load(spec, limit, split=split)
        name = rows[0]["benchmark"] if rows else spec
        for r in rows:  # the math loader skips such rows; a task's own loader may not
            if isinstance(r.get("question"), str) and (bad := lone_surrogate(r["question"])) is not None:
                raise TandemError(f"{spec}: problem {r.get('problem_id')!r}: the question holds {bad}")
        if name in out:
            raise TandemError(f"two benchmark specs resolve to the same name {name!r} (second: {spec})")
        out[name] = [Problem(r["benchmark"], str(r["problem_id"]), r["question"], gold_text(r["gold"]),
                             r.get("solution"), meta=r) for r in rows]
    return out


__all__ = ["Grade", "TASKS", "Task", "get_task", "gold_text", "load_problems", "prompt_text", "register_task",
           "task_for_eval", "task_row"]
