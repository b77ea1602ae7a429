"""Presenting evaluation results: the battery's tables (``tables``), the self-contained HTML
report (``html``) with its headline (``headline``), sample solutions (``samples``), provenance
(``provenance``) and one palette for every figure (``palette``).
"""
