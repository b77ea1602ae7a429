"""tandem-rlvr: Tandem RLVR (arXiv 2606.28166) training and evaluation.

A trainable senior and a frozen junior co-write every rollout; the verifier rewards the
team's final ``\\boxed{}`` answer; the GRPO loss touches only senior-written tokens.
See ``docs/architecture.md`` for the map of the package.
"""

__version__ = "0.1.0"
