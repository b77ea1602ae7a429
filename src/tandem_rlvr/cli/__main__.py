"""``python -m tandem_rlvr.cli``: the ``tandem`` command."""

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
