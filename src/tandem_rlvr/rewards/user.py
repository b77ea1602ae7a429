"""A user's own reward function: ``--reward module:function`` or ``--reward path/to/file.py:function``.

The function follows TRL's reward-function convention: it is called with ``prompts``,
``completions``, ``completion_ids`` and the training dataset's columns as keyword arguments
(here ``answer``, ``problem_id``, ``task_row``: the task's row as JSON; plus TRL's
``trainer_state``, ``log_metric`` and ``log_extra``), and returns a list of one finite number (or
None: no reward from this function) per completion. Anything else (a raise, ``SystemExit`` included,
the wrong count, NaN or inf, a string, None for the whole batch, a generator, a scalar) stops the run
with one line naming the function and the training step (``rewards.terms.checked_call``); the run
resumes from its last checkpoint. Accept ``**kwargs`` for the columns you do not use::

    def brevity(prompts, completions, completion_ids, **kwargs):
        return [1.0 if len(ids) < 200 else 0.0 for ids in completion_ids]

It runs as the reward term ``user`` (logged as ``rewards/user/mean``), with the coefficient of
that term (``reward_terms: [correct, "user:0.5"]``; setting ``reward`` alone adds ``user:1``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path

from ..errors import TandemError


def load_reward(spec: str):
    """The callable ``spec`` names; a one-line TandemError naming the spec otherwise."""
    where, sep, name = str(spec).rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise TandemError(f"--reward {spec!r}: expected module:function or path/to/file.py:function")
    if where.endswith(".py") or "/" in where or "\\" in where:
        path = Path(where).expanduser()
        if not path.is_file():
            raise TandemError(f"--reward {spec!r}: no such file {where}")
        # one module per file, named by its path, so two reward files with the same stem do not collide
        mod_name = "tandem_user_reward_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
        module = sys.modules.get(mod_name)
        if module is None:
            loader_spec = importlib.util.spec_from_file_location(mod_name, path)
            module = importlib.util.module_from_spec(loader_spec)
            try:
                loader_spec.loader.exec_module(module)
            except Exception as e:
                raise TandemError(f"--reward {spec!r}: importing {where} failed ({type(e).__name__}: {e})") from None
            sys.modules[mod_name] = module
    else:
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as e:
            raise TandemError(f"--reward {spec!r}: no module {e.name!r}") from None
        except Exception as e:
            raise TandemError(f"--reward {spec!r}: importing {where} failed ({type(e).__name__}: {e})") from None
    fn = getattr(module, name, None)
    if fn is None:
        raise TandemError(f"--reward {spec!r}: {where} has no {name!r}")
    if not callable(fn):
        raise TandemError(f"--reward {spec!r}: {name!r} is not callable")
    return UserReward(fn, spec)


class UserReward:
    """The user's function as the reward term ``user``: checks what it returns, names it in errors."""

    __name__ = "user"

    def __init__(self, fn, spec: str):
        self.fn, self.spec = fn, spec

    def __call__(self, prompts, completions, **kwargs) -> list:
        from .terms import checked_call

        return checked_call(self.fn, f"reward function {self.spec} (--reward)", prompts, completions, kwargs)
