"""Measuring evaluation runs: pure statistics (``metrics``), the junior's view of the senior
(``legibility``, ``legibility_text``), distributional drift (``drift``), runs side by side
(``compare``, ``comparable``), and re-reading stored samples (``regrade``, ``replay``).
"""
