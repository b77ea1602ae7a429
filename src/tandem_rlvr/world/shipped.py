"""The built-in worlds as the package ships them: built once by the project, never rebuilt on use.

What: ``shipped/<world>/`` holds, for each of ``tiny``, ``tiny-drift`` and ``tiny-code``, the
``senior/`` (the base model) and ``junior/`` model directories (safetensors, config, tokenizer)
and the ``world.json`` the build wrote; ``shipped/tiny-xjunior/`` holds the second-tokenizer
junior (``world/cross.py``) and its ``cross.json``. Each json's ``build`` entry names the stack
they were made on: the torch, transformers and tokenizers versions, the thread count and the
hash of the build's source files.

Why: a world's weights depend on the stack that trained it (another torch version sums in
another order, and 600 steps carry that into another model), so a world built on the user's
machine could give other figures than the docs, and a first build costs minutes to an hour.
Shipping the project's own build makes every built-in name (``tiny``, ``tiny-junior``,
``tiny-drift``, ... in ``models.NAMED_MODELS``) load at once, on any stack, the models the
docs measured. ``tandem world build`` still builds into the cache (``build.build_world``), and
``tandem world verify`` rebuilds and compares with what ships (``world/verify.py``).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import TandemError

SHIPPED_DIR = Path(__file__).resolve().parent / "shipped"
SHIPPED_WORLDS = ("tiny", "tiny-drift", "tiny-code")  # each: senior/, junior/, world.json
CROSS_JUNIOR = "tiny-xjunior"  # junior/, cross.json: the second-tokenizer junior of ``tiny``
CROSS_BASE = "tiny"  # the world whose senior it pairs with
REINSTALL = "reinstall tandem-rlvr, or build one into the cache with `tandem world build`"


def shipped_root(name: str, shipped: Path | None = None) -> Path:
    """The folder of shipped world ``name`` (one of ``SHIPPED_WORLDS`` or ``CROSS_JUNIOR``); a
    missing one (an install that left out the package data) is a ``TandemError`` saying so."""
    if name not in (*SHIPPED_WORLDS, CROSS_JUNIOR):
        raise TandemError(f"unknown built-in world {name!r}; valid: {', '.join((*SHIPPED_WORLDS, CROSS_JUNIOR))}")
    root = (shipped or SHIPPED_DIR) / name
    meta = root / ("cross.json" if name == CROSS_JUNIOR else "world.json")
    if not meta.is_file():
        raise TandemError(f"the built-in world {name} is missing from this installation ({meta} not found); "
                          f"{REINSTALL}")
    return root


def shipped_world(name: str, shipped: Path | None = None):
    """The shipped world ``name`` as a ``build.WorldPaths`` (base = ``senior/``, its ``world.json`` as meta)."""
    from .build import WorldPaths
    from .records import read_record

    root = shipped_root(name, shipped)
    meta = read_record(root / "world.json", ("key",), fix=REINSTALL)
    return WorldPaths(root, root / "senior", root / "junior", meta)


def shipped_model(name: str) -> Path:
    """The model directory of a built-in model name: ``<world>`` (its base), ``<world>-junior``, ``tiny-xjunior``."""
    if name == CROSS_JUNIOR:
        return shipped_root(name) / "junior"
    world, junior = (name.removesuffix("-junior"), True) if name.endswith("-junior") else (name, False)
    # the folders shipped_world names, without importing the build (and with it the model code): a
    # command that only reads a built-in model's tokenizer to check its input stays quick
    return shipped_root(world) / ("junior" if junior else "senior")


SHIPPED_PARTS = ("tandem_rlvr", "world", "shipped")  # where any install keeps them: .../tandem_rlvr/world/shipped/


def shipped_name(path: Path) -> str | None:
    """The built-in model name of a directory inside the shipped worlds, else None: this install's, or
    (a path recorded by another install or worktree, which may be gone or stale) any path ending in
    ``tandem_rlvr/world/shipped/<world>/<senior|junior>`` of a shipped world, existing or not."""
    try:
        parts = Path(path).expanduser().resolve().relative_to(SHIPPED_DIR).parts
    except ValueError:
        whole = Path(path).expanduser().parts
        if len(whole) < 5 or whole[-5:-2] != SHIPPED_PARTS or whole[-2] not in (*SHIPPED_WORLDS, CROSS_JUNIOR):
            return None
        parts = whole[-2:]
    if len(parts) != 2:
        return None
    world, who = parts
    if world == CROSS_JUNIOR:
        return world if who == "junior" else None
    return world if who == "senior" else f"{world}-junior" if who == "junior" else None
