"""One colour, line style and marker per method, for every figure the project draws.

Why: a reader compares methods across figures (pass@k, handoff, drift, training dynamics, the
demo's curves), so GRPO must look the same in all of them. Every plotting function takes its
line style from ``line_style(name)``; ``drawn_styles(fig)`` reads back what a figure really
drew (the report writes it to ``figures/styles.json`` and the tests check it).

The mapping (matplotlib's tab10 colours; docs/evaluation.md, "Figures"):

| method | names | colour | line | marker |
|---|---|---|---|---|
| Tandem RLVR | tandem, trl | green #2ca02c | solid | o |
| vanilla GRPO | grpo | orange #ff7f0e | dashed | s |
| KL-Reg | klreg, kl-reg | blue #1f77b4 | dash-dot | ^ |
| base model | base | grey #7f7f7f | dotted | x |
| junior | junior | purple #9467bd | dotted | D |

Any other run name gets one of the remaining tab10 colours, chosen by a hash of the name, so it
too keeps its colour across figures.
"""

from __future__ import annotations

import zlib

from matplotlib.colors import to_hex
from matplotlib.lines import Line2D

METHOD_STYLES: dict[str, dict[str, str]] = {
    "tandem": {"color": "#2ca02c", "linestyle": "-", "marker": "o"},
    "grpo": {"color": "#ff7f0e", "linestyle": "--", "marker": "s"},
    "klreg": {"color": "#1f77b4", "linestyle": "-.", "marker": "^"},
    "base": {"color": "#7f7f7f", "linestyle": ":", "marker": "x"},
    "junior": {"color": "#9467bd", "linestyle": ":", "marker": "D"},
}
ALIASES = {"trl": "tandem", "tandem-rlvr": "tandem", "kl-reg": "klreg", "kl_reg": "klreg", "vanilla": "grpo"}
_OTHER = ("#d62728", "#8c564b", "#e377c2", "#bcbd22", "#17becf")


def line_style(name: str) -> dict[str, str]:
    """matplotlib keyword arguments (color, linestyle, marker) of the run called ``name``."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key in METHOD_STYLES:
        return dict(METHOD_STYLES[key])
    return {"color": _OTHER[zlib.crc32(key.encode()) % len(_OTHER)], "linestyle": "-", "marker": "o"}


def drawn_styles(fig) -> dict[str, dict[str, dict[str, str]]]:
    """{panel title: {label: {color, linestyle}}} of the labelled lines, error bars and scatters
    of a figure, read from its artists (not from ``line_style``)."""
    out: dict[str, dict[str, dict[str, str]]] = {}
    for i, ax in enumerate(fig.axes):
        handles, labels = ax.get_legend_handles_labels()
        panel = out.setdefault(ax.get_title() or f"panel {i}", {})
        for h, label in zip(handles, labels, strict=True):
            line = h[0] if isinstance(h, tuple) else h  # an errorbar container: (data line, caps, bars)
            if isinstance(line, Line2D):
                panel[label] = {"color": to_hex(line.get_color()), "linestyle": str(line.get_linestyle())}
            else:  # a scatter
                panel[label] = {"color": to_hex(line.get_facecolor()[0]), "linestyle": "none"}
    return {t: p for t, p in out.items() if p}
