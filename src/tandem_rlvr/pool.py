"""A junior pool: which frozen juniors a senior co-writes with, in what proportions, and the seeded
draw that gives each rollout its junior.

The paper pairs the senior with one fixed junior and names "a pool of diverse juniors" as its first
direction for future work. A pool is written ``A,B,C`` (equal weights), ``A:0.5,B:0.25,C:0.25``
(weights, normalised to sum to 1; give all or none), or as a YAML list (a file ``pool.yaml`` or the
``junior:`` key of a run's YAML) of names or ``{name: A, weight: 0.5}`` mappings. A one-junior pool
is today's fixed junior.

The draw is a pure function of the run's seed and the rollout's coordinates (update step, prompt,
and the rollout within its group when each rollout draws its own), so a resumed run, a replay or a
second process redraws exactly the same junior without any state to save; the name drawn is written
with the rollout.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

from .errors import TandemError
from .io import read_text

DRAWS = ("group", "rollout")  # one junior per GRPO group (default), or one per rollout


@dataclass(frozen=True)
class JuniorPool:
    """Junior names (checkpoints or built-in names) and their draw probabilities (summing to 1)."""

    names: tuple[str, ...]
    weights: tuple[float, ...]

    def __post_init__(self):
        if not self.names:
            raise TandemError("junior pool: empty")
        if len(set(self.names)) != len(self.names):
            dup = sorted({n for n in self.names if self.names.count(n) > 1})
            raise TandemError(f"junior pool: {', '.join(dup)} named twice")
        if len(self.weights) != len(self.names) or not math.isclose(sum(self.weights), 1.0, abs_tol=1e-9):
            raise TandemError("junior pool: weights must be one per junior and sum to 1")

    @classmethod
    def parse(cls, spec: str | list | tuple) -> JuniorPool:
        """A pool from ``A,B``, ``A:0.7,B:0.3``, a YAML file of the list, or the list itself."""
        if isinstance(spec, (list, tuple)):
            return cls._from_items([_yaml_item(x) for x in spec], str(spec))
        text = str(spec).strip()
        if text.endswith((".yaml", ".yml")) and "," not in text:
            return cls.from_yaml(Path(text))
        return cls._from_items([_text_item(part) for part in text.split(",")], text)

    @classmethod
    def from_yaml(cls, path: Path) -> JuniorPool:
        import yaml

        if not path.is_file():
            raise TandemError(f"junior pool {path}: no such file")
        try:
            items = yaml.safe_load(read_text(path))  # not UTF-8: one line naming the file and the byte
        except yaml.YAMLError as e:
            raise TandemError(f"junior pool {path}: not YAML ({str(e).splitlines()[0]})") from None
        if isinstance(items, dict) and "juniors" in items:
            items = items["juniors"]
        if not isinstance(items, list):
            raise TandemError(f"junior pool {path}: expected a list of juniors (names or {{name, weight}})")
        return cls._from_items([_yaml_item(x) for x in items], str(path))

    @classmethod
    def _from_items(cls, items: list[tuple[str, float | None]], source: str) -> JuniorPool:
        if not items:
            raise TandemError(f"junior pool {source!r}: empty")
        given = [w for _, w in items if w is not None]
        if given and len(given) != len(items):
            raise TandemError(f"junior pool {source!r}: give a weight to every junior or to none")
        raw = given or [1.0] * len(items)
        total = sum(raw)
        return cls(tuple(n for n, _ in items), tuple(w / total for w in raw))

    @property
    def single(self) -> bool:
        return len(self.names) == 1

    def spec(self) -> str:
        """The canonical text form (``A`` for one junior, else ``A:w,B:w``), which ``parse`` reads back."""
        if self.single:
            return self.names[0]
        return ",".join(f"{n}:{w:.12g}" for n, w in zip(self.names, self.weights, strict=True))

    @property
    def labels(self) -> tuple[str, ...]:
        """Each junior's short name in log keys and rollout records (``junior/<label>/reward``): the last
        part of its path or id (``runs/w/junior`` -> ``junior``), or the whole name with ``/`` as ``_``
        for all when two last parts are equal."""
        last = tuple(n.rstrip("/").rsplit("/", 1)[-1] or n for n in self.names)
        if len(set(last)) == len(last):
            return last
        return tuple(n.strip("/").replace("/", "_") for n in self.names)

    def index(self, name: str) -> int:
        """The position of the junior ``name`` (its name as given or its label); a TandemError listing the pool."""
        for i, (n, label) in enumerate(zip(self.names, self.labels, strict=True)):
            if name in (n, label):
                return i
        raise TandemError(f"junior {name!r} is not in the pool; valid: {', '.join(self.labels)}")

    def devices(self, spec: str | None) -> tuple[str | None, ...]:
        """Each junior's device from ``spec``: unset (None each: the senior's), one for all, or one per
        junior, comma-separated (``cuda:1,cuda:2``)."""
        if not spec:
            return (None,) * len(self.names)
        devices = tuple(d.strip() for d in spec.split(","))
        if len(devices) == 1:
            return devices * len(self.names)
        if len(devices) != len(self.names) or not all(devices):
            raise TandemError(f"junior_device {spec!r}: give one device for all juniors or one per junior "
                              f"({len(self.names)}: {', '.join(self.labels)})")
        return devices

    def draw(self, seed: int, step: int, prompt: int, rollout: int = 0) -> int:
        """The index of the junior of rollout ``rollout`` of prompt ``prompt`` at update ``step``
        (``rollout`` = 0 for a group-shared draw): inverse CDF of a uniform from a hash of the four."""
        if self.single:
            return 0
        digest = hashlib.sha256(f"tandem-junior-pool|{seed}|{step}|{prompt}|{rollout}".encode()).digest()
        u = int.from_bytes(digest[:8], "big") / 2**64  # in [0, 1)
        cumulative, acc = [], 0.0
        for w in self.weights[:-1]:
            acc += w
            cumulative.append(acc)
        return bisect.bisect_right(cumulative, u)


def _text_item(part: str) -> tuple[str, float | None]:
    part = part.strip()
    if not part:
        raise TandemError("junior pool: an empty name (two commas, or one at an end)")
    name, sep, tail = part.rpartition(":")
    if sep and name:
        try:
            w = float(tail)
        except ValueError:
            return part, None  # a colon inside a name, not a weight
        return name.strip(), _weight(w, part)
    return part, None


def _yaml_item(item) -> tuple[str, float | None]:
    if isinstance(item, str):
        return _text_item(item)
    if isinstance(item, dict) and isinstance(item.get("name"), str) and set(item) <= {"name", "weight"}:
        w = item.get("weight")
        if w is None:
            return item["name"], None
        if isinstance(w, bool) or not isinstance(w, (int, float)):
            raise TandemError(f"junior pool: weight of {item['name']} is not a number: {w!r}")
        return item["name"], _weight(float(w), item["name"])
    raise TandemError(f"junior pool: {item!r} is neither a name nor a {{name, weight}} mapping")


def _weight(w: float, where: str) -> float:
    if not math.isfinite(w) or w <= 0:
        raise TandemError(f"junior pool: weight in {where!r} must be a finite number > 0")
    return w
