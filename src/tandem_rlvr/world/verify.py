"""``tandem world verify``: rebuild a built-in world here and compare it with the one that ships.

What: the world is built into the cache (``build.build_world``, keyed as every build; a world
already cached under this machine's key is reused unless ``force``), then every file of its
model directories is compared byte for byte with the shipped world's (``world/shipped.py``).
Identical means this machine's stack reproduces the project's build exactly. Otherwise the
report says which files differ, how far each differing weight tensor moved (largest absolute
difference), how the accuracies measured by the two builds differ, and on which stacks the two
were built (``world.json``'s ``build``): a build on another torch is expected to differ.

The world.json files themselves are not compared byte for byte: they record build timings.

Run: ``tandem world verify --world tiny`` (exit status 0 identical, 1 different).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import TandemError
from .shipped import CROSS_BASE, CROSS_JUNIOR, SHIPPED_WORLDS, shipped_root

META = {"world": "world.json", "cross": "cross.json"}


def verify_world(name: str, cfg=None, shipped: Path | None = None, cache=None, force: bool = False,
                 progress: bool = True) -> dict:
    """Rebuild world ``name`` (``cfg``: its ``WorldConfig``, default the built-in one) and compare
    it with the shipped one under ``shipped`` (default the package's); returns ``compare_builds``'s
    report with the world's name and both roots."""
    from .build import build_world, named_world
    from .cross import build_cross_junior

    ship = shipped_root(name, shipped)
    if name == CROSS_JUNIOR:
        rebuilt = build_cross_junior(cfg or named_world(CROSS_BASE), cache=cache, progress=progress).parent
    else:
        rebuilt = build_world(cfg or named_world(name), cache=cache, force=force, progress=progress).root
    return {"world": name, "shipped": str(ship), "rebuilt": str(rebuilt), **compare_builds(ship, rebuilt)}


def compare_builds(shipped: Path, rebuilt: Path) -> dict:
    """Byte comparison of two builds of one world (model directories, the json beside them).

    ``identical``: every file of the model directories is the same bytes and none is missing
    on either side. ``files``: the relative paths that differ (``differs``) or exist on one
    side only (``only shipped`` / ``only rebuilt``). ``tensors``: per differing safetensors
    file, the largest absolute difference of each tensor that differs. ``accuracy``: per entry of
    the json's ``accuracy``, the shipped and rebuilt values and rebuilt minus shipped. ``stack``:
    both builds' ``build`` entries when they differ."""
    meta_name = META["cross"] if (shipped / META["cross"]).is_file() else META["world"]
    old, new = _read(shipped / meta_name), _read(rebuilt / meta_name)
    files, tensors = {}, {}
    names = ({p.relative_to(shipped) for p in _model_files(shipped)}
             | {p.relative_to(rebuilt) for p in _model_files(rebuilt)})
    for rel in sorted(names):
        a, b = shipped / rel, rebuilt / rel
        if not b.is_file() or not a.is_file():
            files[str(rel)] = "only shipped" if a.is_file() else "only rebuilt"
        elif a.read_bytes() != b.read_bytes():
            files[str(rel)] = "differs"
            if rel.suffix == ".safetensors":
                tensors[str(rel)] = tensor_differences(a, b)
    acc_old, acc_new = old.get("accuracy") or {}, new.get("accuracy") or {}
    accuracy = {k: {"shipped": acc_old.get(k), "rebuilt": acc_new.get(k),
                    "diff": (acc_new[k] - acc_old[k]) if k in acc_old and k in acc_new else None}
                for k in sorted(set(acc_old) | set(acc_new))}
    report = {"identical": not files, "files": files, "tensors": tensors, "accuracy": accuracy}
    if old.get("build") != new.get("build"):
        report["stack"] = {"shipped": old.get("build"), "rebuilt": new.get("build")}
    return report


def tensor_differences(a: Path, b: Path) -> dict[str, float | str]:
    """Per tensor of two safetensors files that differ: the largest absolute difference (float),
    or why it cannot be compared ("shape", "only in one")."""
    from safetensors.torch import load_file

    ta, tb = load_file(a), load_file(b)
    out: dict[str, float | str] = {}
    for k in sorted(set(ta) | set(tb)):
        if k not in ta or k not in tb:
            out[k] = "only in one"
        elif ta[k].shape != tb[k].shape:
            out[k] = "shape"
        elif not ta[k].equal(tb[k]):
            out[k] = float((ta[k].double() - tb[k].double()).abs().max())
    return out


def _model_files(root: Path) -> list[Path]:
    return [p for d in ("senior", "junior") if (root / d).is_dir() for p in (root / d).rglob("*") if p.is_file()]


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise TandemError(f"{path}: cannot read the build's record ({e})") from None


def format_report(report: dict) -> str:
    """The report as a few plain lines: the verdict, differing files, accuracies, stacks."""
    lines = [f"{report['world']}: {'byte-identical to' if report['identical'] else 'differs from'} the shipped world "
             f"(rebuilt: {report['rebuilt']})"]
    for rel, what in report["files"].items():
        moved = report["tensors"].get(rel)
        worst = max((v for v in (moved or {}).values() if isinstance(v, float)), default=None)
        lines.append(f"  {rel}: {what}" + (f" ({len(moved)} tensors differ, largest change {worst:.3g})"
                                            if moved and worst is not None else ""))
    for k, v in report["accuracy"].items():
        if v["shipped"] != v["rebuilt"] or not report["identical"]:
            diff = f"{v['diff']:+.3f}" if v["diff"] is not None else "-"
            lines.append(f"  accuracy {k}: shipped {_fmt(v['shipped'])}, rebuilt {_fmt(v['rebuilt'])} ({diff})")
    if "stack" in report:
        s = report["stack"]
        keys = sorted({*(s["shipped"] or {}), *(s["rebuilt"] or {})})
        lines += [f"  stack {k}: shipped {(s['shipped'] or {}).get(k)}, rebuilt {(s['rebuilt'] or {}).get(k)}"
                  for k in keys if (s["shipped"] or {}).get(k) != (s["rebuilt"] or {}).get(k)]
    return "\n".join(lines)


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.3f}"


VERIFIABLE = (*SHIPPED_WORLDS, CROSS_JUNIOR)
