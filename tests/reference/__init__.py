"""Independent reference implementations the tests compare the package against, a few lines of plain torch,
numpy or Python per rule, written without the code under test: ``grpo_loss`` (the GRPO loss and gradient by
hand), ``pool`` (a junior pool's seeded draw and the row-by-row check of a pool evaluation), ``schedules``
(plain full-prefix generation under an author rule, and the reference decoder's boundary sets), ``decoder``
(the slow full-prefix tandem decoder: one row, no cache, its own sampler and boundary sets). Importable as
``reference.<module>`` (``tests/`` is on ``sys.path``: see ``helpers``)."""
