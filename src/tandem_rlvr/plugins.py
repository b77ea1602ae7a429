"""Plug-ins from outside the package, imported in every process that resolves a registry.

A plug-in is a module whose import runs registry lines (``REGISTRY["mine"] = ...``,
``register_task(...)``, ``TERMS[...] = ...``, an ``ENGINES`` row, ``register_benchmark(...)``;
docs/contributing.md). A registration made at run time lives in one process, so every process of a
run must import the same modules: the ``tandem`` command itself (its parser's choices, the config's
checks), each torchrun worker (it runs the same command), and the vLLM processes of an engine or of
``tandem serve`` (the logits processor replays schedules by name). Two ways to name them:

- **an entry point** of an installed distribution, group ``tandem_rlvr.plugins``
  (``[project.entry-points."tandem_rlvr.plugins"]`` ``mine = "my_pkg.tandem_plugin"``; a value
  ``module:function`` is called with no arguments). Loaded once per process by ``load_plugins``.
- **a run's ``plugins`` setting** (``tandem train --plugins my_mod,other``, YAML ``plugins: [...]``),
  recorded in its config.json, so a resume and every worker import them (``TrainConfig.from_keys``
  imports them before it checks the parts). Other commands, and ``tandem serve``, read
  ``$TANDEM_PLUGINS`` (comma-separated modules).

Modules named by a setting are added to ``$TANDEM_PLUGINS`` in this process, so that the processes
it starts (vLLM's engine core and workers, the server of ``tandem serve``) import them too, through
the ``vllm.general_plugins`` hook (``engines/vllm_plugin.py``). A plug-in that fails to import is one
line naming it (a ``TandemError``), before any work.
"""

from __future__ import annotations

import os
from importlib import import_module
from importlib.metadata import entry_points
from types import ModuleType
from typing import Sequence

from .errors import TandemError

GROUP = "tandem_rlvr.plugins"
ENV = "TANDEM_PLUGINS"
_loaded: dict[str, str] = {}  # what was loaded in this process -> where it was named
_entry_points_read = False


def module_list(value) -> list[str]:
    """A ``plugins`` value as a list of module names: a comma-separated string or a list of strings."""
    if value is None:
        return []
    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise TandemError(f"plugins must be module names (comma-separated), got {value!r}")
    return [n.strip() for n in names if n.strip()]


def load_plugins(modules: Sequence[str] = ()) -> list[str]:
    """Import the plug-ins not imported yet in this process: the ``tandem_rlvr.plugins`` entry points
    (read once), ``$TANDEM_PLUGINS`` and ``modules`` (added to ``$TANDEM_PLUGINS`` for child
    processes). Returns everything loaded in this process, in order."""
    global _entry_points_read
    if not _entry_points_read:
        _entry_points_read = True
        for ep in entry_points(group=GROUP):
            dist = getattr(ep.dist, "name", "?")
            _load(f"{ep.name}={ep.value}", f"plug-in entry point {ep.name!r} ({ep.value}, distribution {dist})",
                  ep.load)
    named = [*module_list(os.environ.get(ENV)), *module_list(list(modules))]
    for spec in named:
        _load(spec, f"plug-in module {spec!r}", lambda spec=spec: _resolve(spec))
    if modules:
        os.environ[ENV] = ",".join(dict.fromkeys(named))
    return list(_loaded)


def _resolve(spec: str):
    module, _, attr = spec.partition(":")
    obj = import_module(module)
    return getattr(obj, attr) if attr else obj


def _load(key: str, what: str, load) -> None:
    if key in _loaded:
        return
    try:
        obj = load()
        if callable(obj) and not isinstance(obj, ModuleType):
            obj()
    except TandemError as e:
        raise TandemError(f"{what}: {e}") from None
    except Exception as e:  # an import error, or the plug-in's own: named, in one line
        raise TandemError(f"{what} failed to load: {type(e).__name__}: {e}") from None
    _loaded[key] = what
