"""Alias of ``tandem_rlvr.recipes.demo`` (``tandem demo``), where the demo lives."""

from .recipes.demo import WORLDS, drift_note, plot_curves, battery_tables, report_of, run_demo

__all__ = ["WORLDS", "drift_note", "plot_curves", "battery_tables", "report_of", "run_demo"]
