"""Independent reference implementations the tests compare the package against: a few lines of plain
torch, numpy or Python per rule, written without the code under test (the full-prefix decoder, the
pool's junior draw, the GRPO loss by hand). Importable as ``reference.<module>`` (``tests/`` is on
``sys.path``: see ``helpers``)."""
