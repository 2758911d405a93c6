"""``python -m profiling_utils``: see :mod:`profiling_utils.cli`."""

import gc
import os
import sys

# The command creates many objects and no cycles worth collecting, then exits: the cyclic
# collector would only walk the trace's objects again (0.03 s per 100 MB of trace), and the
# imports below alone would set it off a few times.
if __name__ == "__main__":
    gc.disable()

from .cli import main  # noqa: E402

# The guard keeps worker processes started by spawn (which import ``__main__``) from running
# the command line again.
if __name__ == "__main__":
    # Exit without tearing down the interpreter, the trace kept rather than freed: freeing a
    # large trace's objects one by one costs about 0.07 s per 100 MB of trace, and nothing is
    # left to clean up.
    kept: list = []  # held here, so that the traces outlive main() and are never freed
    status = main(keep_traces=kept)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:  # a closed pipe (``... | head``): nothing more can be written anyway
            pass
    os._exit(status)
