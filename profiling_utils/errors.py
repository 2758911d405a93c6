"""The one exception the library raises for a trace it cannot read."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["TraceError"]


class TraceError(ValueError):
    """A trace file that cannot be read as a PyTorch profiler (Kineto) trace.

    Raised for a missing or empty file, gzip or JSON that is cut short or malformed, JSON
    that is not a trace, and events of the wrong shape. The message always names the file
    and what is wrong, so it can be shown to a user as it is.

    Attributes:
        path: The file that was being read.
        reason: What is wrong with it, without the path.
        not_a_trace: Whether the file reads as JSON but is no Kineto trace at all (no
            ``traceEvents``, another tool's Chrome-format JSON), rather than a trace that is
            damaged: a directory of traces may hold such files beside them.

    Example::

        try:
            trace = load_trace("run.json.gz")
        except TraceError as err:
            print(err)  # "run.json.gz: JSON is cut short (the file looks truncated)"
    """

    path: Path
    reason: str
    not_a_trace: bool

    def __init__(
        self, path: str | os.PathLike[str], reason: str, *, not_a_trace: bool = False
    ) -> None:
        self.path = Path(path)
        self.reason = reason
        self.not_a_trace = not_a_trace
        super().__init__(f"{path}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.path, self.reason, self.not_a_trace))


def _rebuild(kind: type[TraceError], path: Path, reason: str, not_a_trace: bool) -> TraceError:
    return kind(path, reason, not_a_trace=not_a_trace)
