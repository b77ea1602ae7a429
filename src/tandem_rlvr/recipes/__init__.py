"""Recipes: end-to-end runs built on the library, each a thin layer over ``pipeline``.

- ``pipeline.py``: what every recipe shares: train the three methods (GRPO, Tandem, KL-Reg),
  evaluate a senior (solo, handoff, junior legibility), run the battery (drift, comparison
  tables with paired t-tests);
- ``demo.py``: ``tandem demo``, the whole pipeline on a built-in tiny world;
- ``study.py`` (with ``study_stats.py``): ``tandem study drift``, the multi-seed drift-world study;
- ``cli/__init__.py``: their subcommands of the one ``tandem`` entry point.

Nothing below this package imports it (``tests/unit/test_import_graph.py``).
"""
