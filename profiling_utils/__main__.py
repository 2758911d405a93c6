"""``python -m profiling_utils``: see :mod:`profiling_utils.cli`."""

import sys

from .cli import main

# The guard keeps worker processes started by spawn (which import ``__main__``) from running
# the command line again.
if __name__ == "__main__":
    sys.exit(main())
