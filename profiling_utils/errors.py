"""The one exception the library raises for a trace it cannot read."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["TraceError"]


class TraceError(ValueError):
    """A trace file that cannot be read as a PyTorch profiler (Kineto) trace.

    Raised for a missing or empty file, gzip or JSON that is cut short or malformed, JSON
    that is not a trace, and events of the wrong shape. The message always names the file
    and what is wrong, so it can be shown to a user as it is.

    Attributes:
        path: The file that was being read.
        reason: What is wrong with it, without the path.

    Example::

        try:
            trace = load_trace("run.json.gz")
        except TraceError as err:
            print(err)  # "run.json.gz: JSON is cut short (the file looks truncated)"
    """

    path: Path
    reason: str

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{path}: {reason}")

    def __reduce__(self) -> tuple[type[TraceError], tuple[Path, str]]:
        return (type(self), (self.path, self.reason))
