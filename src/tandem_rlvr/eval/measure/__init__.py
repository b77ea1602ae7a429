"""Measuring evaluation runs: pure statistics (``metrics``), the junior's view of the senior
(``legibility``, ``legibility_text``), a judge's rating of each chain of thought (``cot_rating``),
every such measure of a senior's solo samples a row of ``registry``, distributional drift (``drift``), runs side by side
(``compare``, ``comparable``), and re-reading stored samples (``regrade``, ``replay``).
"""
