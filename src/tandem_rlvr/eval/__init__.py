"""Evaluation: what a trained senior can do alone, with a junior, and how far it drifted.

By role, each reading and writing run directories through ``run_files`` (the files of an
evaluation run: samples.jsonl, metrics.json, sources.json, config.json, discovery):

- ``sample/``: n responses per problem, solo or with handoffs to a junior (``sampler``, ``tandem
  eval solo|handoff``; ``text_handoff`` and ``turns`` for the paper's text-level turns, on hf or
  vLLM), and ``probe`` (one forced junior token in correct solo samples);
- ``measure/``: numbers from those samples: ``metrics`` (pass@k, bootstrap SEs, paired tests;
  ``tandem_rlvr.eval.metrics`` is its public path), ``legibility`` (the junior's per-token NLL
  and overlap), ``drift`` (token distributions against the junior's), ``compare`` and
  ``comparable`` (runs side by side, and whether they may be), ``regrade``, ``replay``;
- ``report/``: presenting them: ``tables``, ``html`` (the self-contained report), ``headline``,
  ``samples``, ``provenance``, ``palette``.

The command line of all of it is ``cli/`` (``cli/battery.py``, ``cli/probe.py``); nothing here
parses arguments. See docs/evaluation.md.
"""
