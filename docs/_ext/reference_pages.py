"""Reference content generated from the code at build time, so it cannot drift from it.

Written into ``docs/_generated/`` (git-ignored, left out of the page sources) before Sphinx
reads anything, and pulled into the reference pages with MyST's ``{include}``:

- ``cheatsheet.md``: ``profiling_utils.rules.cheatsheet_markdown()``, the trace reading
  cheatsheet rendered from the rules registry;
- ``api.md``: one ``automodule`` per public module of ``profiling_utils``, found by walking the
  package, so a new module is documented without editing a page;
- ``cli.md``: the ``--help`` of ``python -m profiling_utils`` and of each of its commands,
  from ``profiling_utils.cli.build_parser()``.

Attribute, constant and property docstrings are shown as written: napoleon would read the
words before the first colon of their first line as a type.

A file is rewritten only when its text changes, so an unchanged build re-reads nothing.

Builtin type names in signatures (``bytes``, ``int``) are left unlinked: Sphinx otherwise
looks them up by suffix among our own objects and links ``-> bytes`` to whichever dataclass
has a field called ``bytes``.
"""

from __future__ import annotations

import argparse
import builtins
import importlib
import os
import pkgutil
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx

from profiling_utils.cli import build_parser
from profiling_utils.rules import cheatsheet_markdown

GENERATED = "_generated"
PACKAGE = "profiling_utils"
# Reader's order: what you call first, then what it builds on; anything else follows by name.
API_ORDER = (
    "capture",
    "trace",
    "measures",
    "roofline",
    "rules",
    "compare",
    "render",
    "render.timeline",
    "render.charts",
    "render.html",
    "render.perfetto",
    "render.tables",
    "render.steps",
    "render.ranks",
    "render.listings",
    "loading",
    "errors",
    "provenance",
    "cli",
)


def public_modules() -> list[str]:
    """Every public module of the package (no part starting with ``_``), in reading order."""
    package = importlib.import_module(PACKAGE)
    names = [PACKAGE]

    def fail(name: str) -> None:
        raise ImportError(f"cannot import {name} to document it")

    for info in pkgutil.walk_packages(package.__path__, prefix=f"{PACKAGE}.", onerror=fail):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    rank = {f"{PACKAGE}.{short}": i for i, short in enumerate(API_ORDER)}
    return sorted(names, key=lambda name: (name != PACKAGE, rank.get(name, len(rank)), name))


def api_markdown() -> str:
    """One section per public module: its docstring and the members it defines."""
    parts = []
    for name in public_modules():
        # Members are documented where they are defined; a package's re-exports are not
        # repeated (``ignore-module-all``), so each object has one entry to link to.
        parts.append(
            f"## `{name}`\n\n```{{eval-rst}}\n.. automodule:: {name}\n"
            "   :members:\n   :ignore-module-all:\n```\n"
        )
    return "\n".join(parts)


def cli_markdown() -> str:
    """The help text of ``python -m profiling_utils`` and of each of its commands."""
    parser = build_parser()
    parsers = [parser]
    for action in parser._actions:  # argparse offers no public way to list subcommands
        if isinstance(action, argparse._SubParsersAction):
            parsers.extend(action.choices.values())
    saved_columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "88"  # argparse wraps to the terminal width; fix it
    try:
        return "\n".join(
            f"## `{p.prog}`\n\n```text\n{p.format_help().rstrip()}\n```\n" for p in parsers
        )
    finally:
        if saved_columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved_columns


def write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` unless it already holds exactly that."""
    if path.exists() and path.read_text() == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _unlink_builtin_types(app: Sphinx, doctree: nodes.document) -> None:
    """Look builtin names up exactly (they are not ours, so they stay plain text)."""
    for xref in doctree.findall(addnodes.pending_xref):
        if xref.get("refdomain") == "py" and xref.get("reftarget") in _BUILTIN_NAMES:
            xref.attributes.pop("refspecific", None)


_BUILTIN_NAMES = frozenset(name for name in dir(builtins) if not name.startswith("_"))


def _generate(app: Sphinx) -> None:
    out = Path(app.srcdir) / GENERATED
    write_if_changed(out / "cheatsheet.md", cheatsheet_markdown().rstrip() + "\n")
    write_if_changed(out / "api.md", api_markdown())
    write_if_changed(out / "cli.md", cli_markdown())


# Napoleon reads the first line of an attribute's, a module constant's or a property's
# docstring as Google style's "type: description" and shows the words before its first colon
# as a type ("Type: The call"). Ours are prose, with the type in the annotation: each is kept
# as written, by saving it before napoleon's handler (priority 500) and putting it back after.
_AS_WRITTEN = ("attribute", "data", "property")
_ATTRIBUTE_DOCSTRINGS: dict[str, list[str]] = {}


def _save_attribute_docstring(
    app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    if what in _AS_WRITTEN:
        _ATTRIBUTE_DOCSTRINGS[name] = list(lines)


def _restore_attribute_docstring(
    app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    if what in _AS_WRITTEN and name in _ATTRIBUTE_DOCSTRINGS:
        lines[:] = _ATTRIBUTE_DOCSTRINGS.pop(name)


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("builder-inited", _generate)
    app.connect("doctree-read", _unlink_builtin_types)
    app.connect("autodoc-process-docstring", _save_attribute_docstring, priority=499)
    app.connect("autodoc-process-docstring", _restore_attribute_docstring, priority=501)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
