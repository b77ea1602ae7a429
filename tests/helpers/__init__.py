"""Shared test helpers (builders of configs, batches, runs and files; no tests and no fixtures: those are in
``tests/conftest.py``). Importable as ``helpers.<module>`` from any test because pytest puts ``tests/`` on
``sys.path`` when it loads ``tests/conftest.py``; a subprocess a test starts (torchrun, a server) gets
``tests/`` on its ``PYTHONPATH`` from that test."""
