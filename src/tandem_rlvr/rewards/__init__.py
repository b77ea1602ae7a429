"""Verifiable rewards: binary verifiers of a response against a gold answer.

``score`` is the paper's reward (last ``\\boxed{}`` equivalent to the gold answer, via
math-verify, time-limited); ``get_verifier(name)`` looks verifiers up by name for configs.
"""

from .math import VERIFIERS, extract_boxed, get_verifier, score

__all__ = ["VERIFIERS", "extract_boxed", "get_verifier", "score"]
