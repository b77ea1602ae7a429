"""Alias of ``tandem study``: ``python -m tandem_rlvr.study drift ...`` runs ``tandem study drift ...``.

The study lives in ``tandem_rlvr.recipes.study`` (its aggregate in ``recipes.study_stats``).
"""

import sys

from .recipes.study import JUNIORS, VARIANTS, StudySettings, run_study
from .recipes.study_stats import aggregate, to_markdown

__all__ = ["JUNIORS", "VARIANTS", "StudySettings", "aggregate", "main", "run_study", "to_markdown"]


def main(argv: list[str] | None = None) -> int:
    from .cli import main as tandem

    return tandem(["study", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
