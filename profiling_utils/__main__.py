"""``python -m profiling_utils``: see :mod:`profiling_utils.cli`."""

import os
import sys

from .cli import main

# The guard keeps worker processes started by spawn (which import ``__main__``) from running
# the command line again.
if __name__ == "__main__":
    status = main()
    # Exit without tearing down the interpreter: freeing a large trace's objects one by one
    # costs a tenth of a second per 100 MB of trace, and nothing is left to clean up.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:  # a closed pipe (``... | head``): nothing more can be written anyway
            pass
    os._exit(status)
