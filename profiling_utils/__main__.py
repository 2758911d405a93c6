"""``python -m profiling_utils``: see :mod:`profiling_utils.cli`."""

import sys

from .cli import main

sys.exit(main())
