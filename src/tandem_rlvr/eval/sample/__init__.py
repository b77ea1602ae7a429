"""Sampling an evaluation: n responses per problem, solo or in handoff with a junior.

``sampler`` (``tandem eval solo|handoff``: token-stream handoffs on any engine, resumable),
``text_handoff`` (the paper's text-level turns: each turn re-tokenised for the other model) with
``turns`` (the turn engine seam) and ``text_handoff_vllm`` (those turns on vLLM), and ``probe``
(``tandem probe forced-junior``).
"""
