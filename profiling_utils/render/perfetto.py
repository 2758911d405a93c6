"""Trace downloads and the "Open in Perfetto" button, for the page that shows an example.

An example writes its traces into :func:`trace_dir`; :func:`trace_links` then puts a download
link and an "Open in Perfetto" button for one trace on the page. The button is handled by the
site's own ``perfetto.js``: it fetches the trace from the site, opens https://ui.perfetto.dev,
sends ``PING`` until the UI answers ``PONG`` and then posts the trace's bytes to it, so the
trace never leaves the reader's browser. Where ``perfetto.js`` is not loaded (a notebook), the
button stays hidden and the link and a sentence on opening the file by hand remain.

How traces reach the built site: while the documentation builds, the docs extension sets
:data:`TRACE_DIR_ENV` before each example runs to a folder of its own beside the generated
page (``docs/auto_examples/<section>/traces/<example>/``, emptied first) and
:data:`PAGE_DIR_ENV` to the folder of the page; after the build it copies those folders into
the HTML output at the same place. Outside a docs build :func:`trace_dir` is ``traces`` in
the current directory.

Example::

    run = capture(step, name="512_bf16_warm_eager", out_dir=trace_dir())
    trace_links(run)             # last expression of a cell: link + button on the page
"""

from __future__ import annotations

import html
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..tables import byte_size

__all__ = ["PAGE_DIR_ENV", "TRACE_DIR_ENV", "TraceLinks", "trace_dir", "trace_links"]

TRACE_DIR_ENV = "PROFILING_UTILS_TRACE_DIR"
"""Environment variable naming the folder whose traces the docs build publishes."""
PAGE_DIR_ENV = "PROFILING_UTILS_PAGE_DIR"
"""Environment variable naming the folder of the page being built (links are relative to it)."""

PERFETTO_UI = "https://ui.perfetto.dev"


def trace_dir() -> Path:
    """The folder an example writes its traces into, so that its page can offer them.

    In a docs build this is a folder of the example's own that the build publishes beside
    its page; anywhere else it is ``traces`` under the current directory. Pass it as
    ``capture(..., out_dir=trace_dir())``.
    """
    return Path(os.environ.get(TRACE_DIR_ENV, "traces"))


@dataclass(frozen=True)
class TraceLinks:
    """A trace's download link and "Open in Perfetto" button; shown as HTML in a page."""

    path: Path
    """The trace file on disk."""
    href: str
    """Its URL relative to the page that shows it."""
    title: str
    """The title Perfetto shows for it."""
    size_bytes: int
    """Its size on disk, which is also the size of the buffer handed to Perfetto."""

    def _repr_html_(self) -> str:
        href = html.escape(self.href, quote=True)
        file_name = html.escape(self.path.name, quote=True)
        title = html.escape(self.title, quote=True)
        return (
            f'<div class="pu-trace" data-trace-href="{href}" data-trace-title="{title}" '
            f'data-trace-file="{file_name}">'
            f'<a class="pu-trace-download" href="{href}" download="{file_name}">'
            f"Download <code>{file_name}</code></a> "
            f'<span class="pu-trace-size">({byte_size(self.size_bytes)})</span> '
            '<button type="button" class="pu-perfetto-open" hidden>Open in Perfetto</button>'
            '<p class="pu-perfetto-status" role="status" aria-live="polite">'
            f'To look at it in Perfetto, open <a href="{PERFETTO_UI}">ui.perfetto.dev</a> '
            "and drop the downloaded file onto it.</p></div>"
        )

    def __str__(self) -> str:
        return f"{self.path} ({byte_size(self.size_bytes)})"


def trace_links(trace: Any, *, title: str | None = None) -> TraceLinks:
    """The download link and the "Open in Perfetto" button for one trace.

    Args:
        trace: A :class:`~profiling_utils.capture.Capture` (its ``trace_path``) or the path of
            a trace file (``.json.gz`` or ``.json``).
        title: What Perfetto calls the trace; defaults to the file name without extension.

    Returns:
        A :class:`TraceLinks`, shown as a link and a button when it is the last expression
        of a gallery or notebook cell.

    Raises:
        FileNotFoundError: The trace file does not exist.
        ValueError: In a docs build, the trace is not under :func:`trace_dir`, so the build
            would not publish it and the link would be broken.
    """
    path = Path(getattr(trace, "trace_path", trace))
    if not path.is_file():
        raise FileNotFoundError(f"no trace file {path}")
    page_dir = os.environ.get(PAGE_DIR_ENV)
    if page_dir is None:
        href = Path(os.path.relpath(path.resolve())).as_posix()
    else:
        published = trace_dir().resolve()
        if not path.resolve().is_relative_to(published):
            raise ValueError(
                f"{path} is not under trace_dir() ({published}); the docs build publishes "
                "only the traces written there, so write it with out_dir=trace_dir()"
            )
        href = Path(os.path.relpath(path.resolve(), Path(page_dir).resolve())).as_posix()
    name = path.name.removesuffix(".gz").removesuffix(".json")
    return TraceLinks(path=path, href=href, title=title or name, size_bytes=path.stat().st_size)
