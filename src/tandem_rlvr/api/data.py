"""A user's data and reward functions as a run takes them: a ``datasets.Dataset`` with a ``prompt`` column
(plain text or conversational messages) and any answer columns, and reward callables in TRL's convention
(``f(prompts, completions, completion_ids, **columns) -> list[float | None]``).

The rows become ``Problem``s (the run's validation and overlong-prompt checks read them) whose prompt is
the rendered text the models read: a plain prompt as it is (TRL adds no template to one), a conversational
one through the tokenizer's chat template with the generation prompt, as TRL renders it. Validation scores
each sampled completion with the reward functions (weighted as in training), so ``val/accuracy`` is the
mean weighted reward: the share correct when the reward is a 0/1 correctness.
"""

from __future__ import annotations


from ..data.benchmarks import Problem
from ..errors import TandemError
from ..prompting import render_prompt


def as_dataset(data, name: str):
    """``data`` as a ``datasets.Dataset`` with a ``prompt`` column (a list of dicts is converted)."""
    import datasets

    if isinstance(data, list):
        data = datasets.Dataset.from_list(data)
    if isinstance(data, datasets.DatasetDict):
        raise TandemError(f"{name}: give one split of the DatasetDict (e.g. ds['train']), not {list(data)}")
    if not isinstance(data, datasets.Dataset):
        raise TandemError(f"{name} must be a datasets.Dataset or a list of rows, got {type(data).__name__}")
    if "prompt" not in data.column_names:
        raise TandemError(f"{name} has no 'prompt' column (columns: {', '.join(data.column_names)})")
    return data


def with_problem_ids(data):
    """The dataset with a ``problem_id`` column (the row index, when it has none): the junior pool's draw key."""
    if "problem_id" in data.column_names:
        return data
    return data.add_column("problem_id", [str(i) for i in range(len(data))])


def problems(data, tokenizer, benchmark: str) -> list[Problem]:
    """The rows as ``Problem``s: ``problem`` the rendered prompt, ``answer`` the row's answer (or solution)
    column as text, ``meta`` the whole row (the reward functions' columns)."""
    out = []
    for i, row in enumerate(data):
        answer = row.get("answer", row.get("solution", ""))
        out.append(Problem(benchmark, str(row.get("problem_id", i)), render_prompt(tokenizer, row["prompt"]),
                           "" if answer is None else str(answer), meta=dict(row)))
    return out


def func_name(func) -> str:
    """A reward function's name as a run records it (``module:qualname``; a model: its path)."""
    if isinstance(func, str):
        return func
    return f"{getattr(func, '__module__', '?')}:{getattr(func, '__qualname__', type(func).__name__)}"


class RewardGrade:
    """Validation's score of sampled completions: the weighted sum of the reward functions on each row
    (None scores count 0), called as TRL calls them (conversational prompts get message completions)."""

    def __init__(self, funcs: list, weights: list[float] | None):
        if any(not callable(f) for f in funcs):
            raise TandemError("reward_funcs must be callables (TRL's convention) for validation; a reward model "
                              "given by name is not supported here")
        self.funcs, self.weights = funcs, weights or [1.0] * len(funcs)

    def __call__(self, texts: list[str], rows: list[Problem]) -> list[float]:
        prompts = [p.meta["prompt"] for p in rows]
        chat = not isinstance(prompts[0], str)
        completions = [[{"role": "assistant", "content": t}] for t in texts] if chat else list(texts)
        columns = {k: [p.meta[k] for p in rows] for k in rows[0].meta if k != "prompt"}
        total = [0.0] * len(texts)
        for func, w in zip(self.funcs, self.weights, strict=True):
            got = func(prompts=prompts, completions=completions, completion_ids=None, **columns)
            total = [t + w * (0.0 if g is None else float(g)) for t, g in zip(total, got, strict=True)]
        return total
