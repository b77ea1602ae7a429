"""The built-in tiny world: word-problem tasks, a Qwen-style tokenizer, a base model and a junior.

Everything builds on a laptop CPU in a few minutes with no downloads (see ``docs/tiny_world.md``):

    from tandem_rlvr.world import build_world
    w = build_world()          # cached under cache_dir()/worlds/<config hash>
    w.base, w.junior           # model dirs (base = the senior's initialisation) for AutoModelForCausalLM

Importing this package registers the benchmark ``tiny`` (splits train/val/test) with
``tandem_rlvr.data.benchmarks``, so ``load_benchmark("tiny", split="test")`` works. The
build API (torch, transformers) is imported lazily on first use, so the registration costs
only the standard library.
"""

from __future__ import annotations

from ..prompting import plain_prompt
from .tasks import WorldProblem, make_problems, noisy_solution

# Problems per split when a caller asks for the whole "tiny" benchmark (no limit).
BENCHMARK_SIZES = {"train": 20000, "val": 500, "test": 2000}
_SPLIT_ALIASES = {"validation": "val", "dev": "val"}
_LAZY = {"WorldConfig", "WorldPaths", "build_world", "load_world"}


def tiny_benchmark(split: str | None = None, limit: int | None = None) -> list:
    """The tiny world as benchmark ``Problem`` records (seed 0; ``split`` defaults to test)."""
    from ..data.benchmarks import Problem
    from ..errors import TandemError

    name = _SPLIT_ALIASES.get(split or "test", split or "test")
    if name not in BENCHMARK_SIZES:
        raise TandemError(f"unknown split {split!r} of benchmark 'tiny'; valid: {', '.join(BENCHMARK_SIZES)}")
    n = BENCHMARK_SIZES[name] if limit is None else min(limit, BENCHMARK_SIZES[name])
    return [Problem("tiny", p.problem_id, p.problem, p.answer, p.solution, {"split": name})
            for p in make_problems(n, seed=0, split=name)]


def _register() -> None:
    # Imported here, not at the top of the module: data.benchmarks may itself import this
    # package (after defining register_benchmark) to pull in the registration.
    from ..data.benchmarks import register_benchmark

    register_benchmark("tiny", tiny_benchmark)


def __getattr__(name: str):
    if name in _LAZY:
        from . import build

        return getattr(build, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_register()

__all__ = ["BENCHMARK_SIZES", "WorldConfig", "WorldPaths", "WorldProblem", "build_world", "load_world",
           "make_problems", "noisy_solution", "plain_prompt", "tiny_benchmark"]
