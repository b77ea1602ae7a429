"""Evaluation: what a trained senior can do alone, with a junior, and how far it drifted.

``sampler`` samples n responses per problem, solo or with handoffs to a junior (``tandem
eval solo|handoff``), into a resumable run directory; ``metrics`` turns them into pass@k
with bootstrap standard errors; ``legibility`` scores a senior's samples by the junior's
per-token NLL and ``drift`` compares token distributions with the junior's (the paper's
section 5); ``compare`` and ``report`` put runs side by side in tables, figures and one
report. See docs/evaluation.md.
"""
