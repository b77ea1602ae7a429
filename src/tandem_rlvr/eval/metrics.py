"""The public path of the evaluation metrics (DESIGN.md's contract names
``tandem_rlvr.eval.metrics.pass_at_k``); they live in ``eval/measure/metrics.py``."""

from .measure.metrics import *  # noqa: F401,F403
