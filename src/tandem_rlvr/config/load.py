"""The YAML loader: ``load_train_config(preset, file, overrides)`` layers defaults < preset < file < flags.

Keys are the flat setting names (``lr: 1e-6``), as every preset and config file of today writes them;
a file may also group them under their part (``loss: {lr: 1e-6}``, the parts of ``config.train``).
Unknown keys are errors naming the closest valid one, a key given twice is an error, and every value
is checked against its field's type (``"no"`` is not a boolean, 2.5 is not an int), never coerced.
"""

from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path

import yaml

from ..errors import TandemError
from ..io import read_text
from .fields import kind, optional
from .train import PARTS, TrainConfig, config_fields, part_of_key

PRESETS_DIR = "presets"
# Keys that were renamed: the old name gets a one-line error saying where it went.
RENAMED = {"lambda_jun": "junior_imitation (the paper's launcher's lambda_jun is our junior_token_weight)"}


def preset_names() -> list[str]:
    files = resources.files("tandem_rlvr").joinpath(PRESETS_DIR).iterdir()
    return sorted(Path(str(f)).stem for f in files if str(f).endswith(".yaml"))


class _DuplicateKey(Exception):
    pass


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader, except that a mapping key given twice is an error (PyYAML keeps the last
    silently, so a config file's earlier setting of the same key would be ignored unseen)."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                first = seen.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key: SafeLoader's own error follows
                break
            if first != key_node.start_mark.line + 1:
                raise _DuplicateKey(f"key {key!r} given twice (lines {first} and {key_node.start_mark.line + 1})")
        return super().construct_mapping(node, deep)


def _read_yaml(text: str, origin: str) -> dict:
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader) or {}
    except _DuplicateKey as e:
        raise TandemError(f"{origin}: {e}") from None
    except yaml.YAMLError as e:
        raise TandemError(f"{origin}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise TandemError(f"{origin}: expected a mapping of config keys")
    return _flatten(data, origin)


def _flatten(data: dict, origin: str) -> dict:
    """Keys grouped under their part (``loss: {lr: ...}``) made flat; a key under another part, or given
    both flat and grouped, is an error."""
    where, flat = part_of_key(), {}
    for k, v in data.items():
        group = v.items() if k in PARTS and isinstance(v, dict) else [(k, v)]
        for key, value in group:
            if k in PARTS and where.get(key) not in (None, k):
                raise TandemError(f"{origin}: config key {key!r} belongs under {where[key]!r}, not {k!r}")
            if key in flat:
                raise TandemError(f"{origin}: config key {key!r} given twice (flat and under {where.get(key)!r})")
            flat[key] = value
    return flat


def _check_keys(data: dict, origin: str) -> None:
    valid = [f.name for f in config_fields()]
    for k in data:
        if k in RENAMED:
            raise TandemError(f"{origin}: config key {k!r} was renamed {RENAMED[k]}")
        if k not in valid:
            close = difflib.get_close_matches(k, valid, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TandemError(f"{origin}: unknown config key {k!r}{hint}")


def load_preset(name: str) -> dict:
    if name not in preset_names():
        raise TandemError(f"unknown preset {name!r}; valid: {', '.join(preset_names())}")
    text = resources.files("tandem_rlvr").joinpath(PRESETS_DIR, f"{name}.yaml").read_text(encoding="utf-8")
    data = _read_yaml(text, f"preset {name}")
    _check_keys(data, f"preset {name}")
    return data


def _typed(f, value):
    """``value`` checked against field ``f``'s type (and choices); TandemError naming the key.

    YAML's ``"no"`` (a string) is not a boolean and 2.5 is not an int: both are errors, never
    coerced. An int or a number's text (``1e-6``) is accepted for a float, a whole float (3.0) for an int.
    """
    k = kind(f)
    if value is None:
        if optional(f):
            return None
        raise TandemError(f"config key {f.name!r}: expected {k}, got null")
    if k == "bool" and isinstance(value, bool):
        return value
    if k == "int" and not isinstance(value, bool):
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    if k == "float" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if k == "float" and isinstance(value, str):  # PyYAML reads 1e-6 (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    if k == "str" and isinstance(value, str):
        return value  # choices (method, schedule) are checked by the parts
    if f.name == "junior" and isinstance(value, list):  # a YAML list of juniors: a pool, kept as its spec
        from ..pool import JuniorPool

        try:
            return JuniorPool.parse(value).spec()
        except TandemError as e:
            raise TandemError(f"config key 'junior': {e}") from None
    if k not in ("bool", "int", "float", "str"):
        return value
    raise TandemError(f"config key {f.name!r}: expected {k}, got {value!r} ({type(value).__name__})")


def load_train_config(preset: str | None = None, file: str | None = None, overrides: dict | None = None) -> TrainConfig:
    """defaults < preset < YAML file < overrides (flags). Unknown keys are errors."""
    data: dict = {}
    if preset:
        data.update(load_preset(preset))
    if file:
        p = Path(file)
        if not p.is_file():
            raise TandemError(f"config file not found: {file}")
        extra = _read_yaml(read_text(p), file)
        _check_keys(extra, file)
        data.update(extra)
    if overrides:
        _check_keys(overrides, "flags")
        data.update({k: v for k, v in overrides.items() if v is not None})
    for f in config_fields():
        if f.name not in data:
            continue
        if optional(f) and isinstance(data[f.name], str) and data[f.name].lower() in ("none", "null"):
            data[f.name] = None  # "none" on the command line means None for optional keys
        data[f.name] = _typed(f, data[f.name])
    cfg = TrainConfig.from_keys(**data)
    given = {**({k: file for k in extra} if file else {}),
             **{k: "flags" for k, v in (overrides or {}).items() if v is not None}}
    for key, why in cfg.unread_keys().items():
        if key in given:  # a preset's knob a user's schedule does not read is left alone; a user's own is refused
            where = f"--{key.replace('_', '-')}" if given[key] == "flags" else f"{key} in {given[key]}"
            raise TandemError(f"{where} is set but never read: {why}; drop it")
    return cfg
