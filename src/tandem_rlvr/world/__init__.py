"""The built-in tiny world: word-problem tasks, a Qwen-style tokenizer, a base model and a junior.

Everything builds on a laptop CPU in a few minutes with no downloads (see ``docs/tiny_world.md``):

    from tandem_rlvr.world import build_world
    w = build_world()          # cached under cache_dir()/worlds/<config hash>
    w.base, w.junior           # model dirs (base = the senior's initialisation) for AutoModelForCausalLM

The benchmark ``tiny`` (splits train/val/test; ``load_benchmark("tiny", split="test")``)
lives in ``tandem_rlvr.data.benchmarks``, which reads the problems from ``world.tasks``.
The build API (torch, transformers) is imported lazily on first use, so importing this
package costs only the standard library.
"""

from __future__ import annotations

from ..prompting import plain_prompt
from .tasks import WorldProblem, make_problems, noisy_solution

_LAZY = {"WorldConfig", "WorldPaths", "build_world", "load_world"}


def __getattr__(name: str):
    if name in _LAZY:
        from . import build

        return getattr(build, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["WorldConfig", "WorldPaths", "WorldProblem", "build_world", "load_world", "make_problems",
           "noisy_solution", "plain_prompt"]
