"""What each executed gallery example leaves behind, and what the site does with it.

sphinx-gallery executes ``examples/**/plot_*.py`` into ``docs/auto_examples`` and skips an
example whose file has not changed since its last successful run (``<name>.py.md5``). This
extension adds, per example, beside that cache:

- a *run record* ``<name>.run.json``, written just before the example runs: the machine it ran
  on (:func:`profiling_utils.provenance.environment`) and a *fingerprint* of what shapes its
  outputs besides its own file: the ``profiling_utils`` sources, torch, CUDA and the GPU;
- its traces, in ``traces/<name>/`` (emptied before it runs; see
  :func:`profiling_utils.render.trace_dir`), copied into the HTML output after the build;
- its *claims*, ``<name>.claims.json``: every :func:`profiling_utils.claims.claim` it made,
  whether it held and the numbers that decided it (emptied before it runs).

The gallery may have sections (sub-folders of ``examples/``, one per part of the series);
every path above is then inside the section's folder, ``docs/auto_examples/<section>/``.

Before sphinx-gallery looks at its cache, what it generated for an example that is no longer
in the gallery (deleted, renamed or moved to another section) is removed: sphinx-gallery
leaves it, and its ``.rst`` would stay a page of the site. Then every example whose record
is missing or carries another fingerprint loses its ``.md5``, so it runs again: outputs are
never left over from another library version, torch, CUDA or GPU. Every example page then
states where its outputs were made, read from its record, and the ``gallery-provenance``
directive does the same for the whole gallery (the home page). A build without a GPU says,
on each example page and on the gallery's index pages, that the examples ran on the CPU.

Every example page lists its claims under "Checked on this run". A claim that does not hold
raises in its example, which fails the build; with ``PROFILING_UTILS_CLAIMS=report`` it is
marked on the page instead and the build ends with a warning for it. An example that ran on
a GPU and checked no claim fails the build too.

An example that calls ``sys.exit()`` (or ``exit()``, ``quit()``, ``os._exit()``) fails the
build before anything runs: sphinx-gallery catches only ``Exception``, so such a call would
end ``sphinx-build`` with status 0 and no HTML.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from profiling_utils.claims import CLAIMS_FILE_ENV, CLAIMS_MODE_ENV, REPORT, Claim, read_claims
from profiling_utils.claims import mode as claims_mode
from profiling_utils.provenance import Environment, environment
from profiling_utils.render.perfetto import PAGE_DIR_ENV, TRACE_DIR_ENV

logger = logging.getLogger(__name__)

RECORD_SUFFIX = ".run.json"
CLAIMS_SUFFIX = ".claims.json"
TRACES = "traces"
EXAMPLE_PREFIX = "plot_"


@dataclass(frozen=True)
class Example:
    """One gallery example: its source and where its generated page and artifacts live."""

    source: Path
    """``examples/<sub>/<name>.py``."""
    page_dir: Path
    """The folder of its generated page, ``docs/auto_examples/<sub>``."""

    @property
    def name(self) -> str:
        return self.source.stem

    @property
    def md5(self) -> Path:
        """sphinx-gallery's cache key: the example is skipped while this matches the file."""
        return self.page_dir / f"{self.source.name}.md5"

    @property
    def record(self) -> Path:
        return self.page_dir / f"{self.name}{RECORD_SUFFIX}"

    @property
    def claims(self) -> Path:
        """The claims the example made when it last ran (JSON lines, see ``claims.py``)."""
        return self.page_dir / f"{self.name}{CLAIMS_SUFFIX}"

    @property
    def trace_dir(self) -> Path:
        return self.page_dir / TRACES / self.name


def package_digest(package_dir: Path) -> str:
    """SHA-256 over the relative paths and bytes of every file of a package (caches left out)."""
    digest = hashlib.sha256()
    files = sorted(
        p
        for p in package_dir.rglob("*")
        if p.is_file()
        and "__pycache__" not in p.parts
        and not any(part.startswith(".") for part in p.relative_to(package_dir).parts)
    )
    for path in files:
        digest.update(path.relative_to(package_dir).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def fingerprint_parts(package_dir: Path | None = None) -> dict[str, str | None]:
    """What, besides an example's own file, decides its outputs.

    Args:
        package_dir: The ``profiling_utils`` package folder; defaults to the imported one.
    """
    import torch

    if package_dir is None:
        import profiling_utils

        package_dir = Path(profiling_utils.__file__).parent
    return {
        "profiling_utils": package_digest(package_dir),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def fingerprint(parts: dict[str, str | None]) -> str:
    """One hash of :func:`fingerprint_parts`."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


@cache
def _current_fingerprint() -> tuple[str, dict[str, str | None]]:
    parts = fingerprint_parts()
    return fingerprint(parts), parts


def read_record(example: Example) -> dict[str, Any] | None:
    """The example's run record, or ``None`` when it has none (never ran, or unreadable)."""
    try:
        return json.loads(example.record.read_text())
    except (OSError, ValueError):
        return None


def invalidate_stale(examples: list[Example], current: str) -> list[Example]:
    """Make sphinx-gallery re-run every example whose outputs came from another fingerprint.

    Deletes the ``.md5`` of each cached example whose run record is missing or carries a
    fingerprint other than ``current``, or one of whose claims did not hold (a page is never
    kept with a failed claim: the next build checks it again); returns those examples.
    """
    stale = []
    for example in examples:
        if not example.md5.exists():
            continue
        record = read_record(example)
        if (
            record is None
            or record.get("fingerprint") != current
            or not all(made.holds for made in read_claims(example.claims))
        ):
            example.md5.unlink()
            stale.append(example)
    return stale


def outputs_without_example(src_dir: Path, gallery_conf: dict[str, Any]) -> list[Path]:
    """What sphinx-gallery generated for examples that are no longer in the gallery.

    Every file named ``plot_*`` in a folder of the generated gallery, and every trace folder
    ``traces/plot_*/``, whose example (``plot_*.py`` in the matching folder of the sources)
    does not exist: left by an example that was deleted, renamed or moved to another section.
    """
    stale: list[Path] = []

    def visit(folder: Path, sources: Path) -> None:
        for entry in sorted(folder.iterdir()):
            if entry.is_dir() and entry.name == TRACES:
                stale.extend(
                    trace_dir
                    for trace_dir in sorted(entry.iterdir())
                    if trace_dir.name.startswith(EXAMPLE_PREFIX)
                    and not (sources / f"{trace_dir.name}.py").is_file()
                )
            elif entry.is_dir() and entry.name != "images":
                visit(entry, sources / entry.name)
            elif entry.name.startswith(EXAMPLE_PREFIX):
                stem = entry.name.split(".", 1)[0]
                if not (sources / f"{stem}.py").is_file():
                    stale.append(entry)

    for examples_dir, gallery_dir in _gallery_pairs(src_dir, gallery_conf):
        if gallery_dir.is_dir():
            visit(gallery_dir, examples_dir)
    return stale


def remove_outputs_without_example(src_dir: Path, gallery_conf: dict[str, Any]) -> list[Path]:
    """Delete :func:`outputs_without_example`; return what was deleted."""
    stale = outputs_without_example(src_dir, gallery_conf)
    for path in stale:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    return stale


def exit_calls(source: Path) -> list[int]:
    """Lines of ``source`` that end the interpreter: ``sys.exit``, ``exit``, ``quit``, ...."""
    lines = []
    for node in ast.walk(ast.parse(source.read_text(), filename=str(source))):
        if isinstance(node, ast.Raise) and _names_system_exit(node.exc):
            lines.append(node.lineno)
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("exit", "quit"):
            lines.append(node.lineno)
        elif (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and (func.value.id, func.attr) in (("sys", "exit"), ("os", "_exit"))
        ):
            lines.append(node.lineno)
    return sorted(lines)


def _names_system_exit(exc: ast.expr | None) -> bool:
    target = exc.func if isinstance(exc, ast.Call) else exc
    return isinstance(target, ast.Name) and target.id == "SystemExit"


def gallery_examples(src_dir: Path, gallery_conf: dict[str, Any]) -> list[Example]:
    """Every example file of the configured galleries (``plot_*.py``), in file-name order."""
    examples = []
    for examples_dir, gallery_dir in _gallery_pairs(src_dir, gallery_conf):
        for source in sorted(examples_dir.rglob(f"{EXAMPLE_PREFIX}*.py")):
            sub = source.parent.relative_to(examples_dir)
            examples.append(Example(source=source, page_dir=gallery_dir / sub))
    return examples


def _gallery_pairs(src_dir: Path, gallery_conf: dict[str, Any]) -> Iterator[tuple[Path, Path]]:
    examples_dirs = gallery_conf["examples_dirs"]
    gallery_dirs = gallery_conf["gallery_dirs"]
    if isinstance(examples_dirs, str):
        examples_dirs = [examples_dirs]
    if isinstance(gallery_dirs, str):
        gallery_dirs = [gallery_dirs]
    for examples_dir, gallery_dir in zip(examples_dirs, gallery_dirs, strict=True):
        yield (src_dir / examples_dir).resolve(), (src_dir / gallery_dir).resolve()


class ReverseFileNameSortKey:
    """sphinx-gallery ``within_subsection_order``: examples in reverse file-name order.

    A build with the examples run last to first shows that no page depends on what ran
    before it (``PROFILING_UTILS_GALLERY_ORDER=reverse``, read by ``conf.py``). The gallery
    index then lists them in that order too.
    """

    def __init__(self, src_dir: str | os.PathLike[str]) -> None:
        self.src_dir = src_dir

    def __call__(self, filename: str | os.PathLike[str]) -> _Descending:
        return _Descending(str(filename))

    def __repr__(self) -> str:  # sphinx-gallery compares configurations by their repr
        return f"<{type(self).__name__}>"


@dataclass(frozen=True)
class _Descending:
    value: str

    def __lt__(self, other: _Descending) -> bool:
        return self.value > other.value


def reset_example(gallery_conf: dict[str, Any], fname: str | None, when: str) -> None:
    """sphinx-gallery ``reset_modules`` hook, called around each example that is executed.

    Before: empty the example's trace folder, point :func:`profiling_utils.render.trace_dir`
    at it, start an empty claims file for :func:`profiling_utils.claims.claim`, write the run
    record and seed torch. After: unset the trace folder and the claims file.
    """
    if fname is None:
        return
    if when == "after":
        for name in (TRACE_DIR_ENV, PAGE_DIR_ENV, CLAIMS_FILE_ENV):
            os.environ.pop(name, None)
        return
    examples = gallery_examples(Path(gallery_conf["src_dir"]), gallery_conf)
    matches = [e for e in examples if e.source.name == fname]
    if len(matches) != 1:
        raise ExtensionError(
            f"gallery_runs: expected one example named {fname} under examples_dirs, "
            f"found {len(matches)}; executed examples are named {EXAMPLE_PREFIX}*.py"
        )
    example = matches[0]
    shutil.rmtree(example.trace_dir, ignore_errors=True)
    example.trace_dir.mkdir(parents=True)
    os.environ[TRACE_DIR_ENV] = str(example.trace_dir)
    os.environ[PAGE_DIR_ENV] = str(example.page_dir)
    current, parts = _current_fingerprint()
    record = {
        "example": example.source.name,
        "fingerprint": current,
        "fingerprint_parts": parts,
        "environment": environment().as_dict(),
    }
    example.page_dir.mkdir(parents=True, exist_ok=True)
    example.record.write_text(json.dumps(record, indent=2) + "\n")
    example.claims.write_text("")
    os.environ[CLAIMS_FILE_ENV] = str(example.claims)

    import torch

    torch.manual_seed(0)


def share_import_path() -> None:
    """Make Python processes that examples start import this build's ``profiling_utils``.

    Examples run the CLI (``python -m profiling_utils``) and fresh processes
    (:func:`profiling_utils.fresh.run_in_fresh_process`) from other folders; with the
    package's folder first on ``PYTHONPATH`` they import the same sources as the build,
    installed or not.
    """
    import profiling_utils

    root = str(Path(profiling_utils.__file__).resolve().parents[1])
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if paths[:1] != [root]:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])


def _before_gallery(app: Sphinx) -> None:
    """Refuse examples that exit; clear what removed examples left; re-run stale ones."""
    share_import_path()
    examples = gallery_examples(Path(app.srcdir), app.config.sphinx_gallery_conf)
    offenders = [f"{e.source}:{line}" for e in examples for line in exit_calls(e.source)]
    if offenders:
        raise ExtensionError(
            "gallery examples must not exit the interpreter (sphinx-build would then end with "
            "status 0 and no HTML); raise an exception instead: " + ", ".join(offenders)
        )
    removed = remove_outputs_without_example(Path(app.srcdir), app.config.sphinx_gallery_conf)
    if removed:
        src_dir = Path(app.srcdir).resolve()
        logger.info(
            "[gallery_runs] removed what was generated for examples no longer in the gallery "
            "(deleted, renamed or moved to another section): %s",
            ", ".join(p.resolve().relative_to(src_dir).as_posix() for p in removed),
        )
    if not app.config.sphinx_gallery_conf["plot_gallery"]:
        return  # a build that executes nothing keeps the cache it cannot remake
    current, parts = _current_fingerprint()
    stale = invalidate_stale(examples, current)
    if stale:
        logger.info(
            "[gallery_runs] re-running %d example(s) made by another profiling_utils, torch, "
            "CUDA or GPU (now: torch %s, CUDA %s, GPU %s), or with a failed claim: %s",
            len(stale),
            parts["torch"],
            parts["cuda"],
            parts["gpu"],
            ", ".join(e.name for e in stale),
        )


def _publish_traces(app: Sphinx, exception: Exception | None) -> None:
    """Copy each example's trace folder into the HTML output, beside its page."""
    if exception is not None or app.builder.format != "html":
        return
    src_dir, out_dir = Path(app.srcdir).resolve(), Path(app.outdir)
    for example in gallery_examples(src_dir, app.config.sphinx_gallery_conf):
        if example.trace_dir.is_dir():
            target = out_dir / example.trace_dir.relative_to(src_dir)
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(example.trace_dir, target)


def _example_of(app: Sphinx, docname: str) -> Example | None:
    src_dir = Path(app.srcdir).resolve()
    for example in gallery_examples(src_dir, app.config.sphinx_gallery_conf):
        if (example.page_dir / example.name).relative_to(src_dir).as_posix() == docname:
            return example
    return None


CLAIMS_TITLE = "Checked on this run"
LONG_CLAIMS_LIST = 10
"""A list of more claims than this scrolls inside its box (unless one failed), so that the
page's first screen still reaches the prose."""
NO_GPU_CLAIMS_NOTE = (
    "This build had no GPU, so the page's claims about GPU work were not made or checked."
)
GALLERY_CPU_ONLY_NOTE = (
    "The examples below ran on the CPU: the traces they record have no GPU lanes (traces "
    "they read from a GPU machine keep theirs), their profiler tables have no CUDA columns, "
    "and what their text says about GPU work was not checked. The published site is built "
    "on a GPU."
)
CPU_ONLY_NOTE = (
    "This build had no GPU, so the example ran on the CPU: the traces it records have no GPU "
    "lanes (a trace it reads from a GPU machine keeps them), its profiler tables have no CUDA "
    "columns, and what the text says about GPU work is not in the outputs below. The "
    "published site is built on a GPU."
)


def _add_provenance(app: Sphinx, doctree: nodes.document) -> None:
    """Put "where these outputs come from" and "checked on this run" under every example's title.

    The gallery's index, and each section's, says under its title when the examples it
    shows ran without a GPU.
    """
    docname = app.env.docname
    shown = _index_examples(app, docname)
    if shown is not None:
        _add_cpu_only_note(app, doctree, shown)
        return
    example = _example_of(app, docname)
    if example is None:
        return
    app.env.note_dependency(str(example.record))
    app.env.note_dependency(str(example.claims))
    record = read_record(example)
    section = doctree.next_node(nodes.section)
    if section is None:
        return
    note = nodes.admonition(classes=["pu-provenance"])
    note += nodes.title(text="Where these outputs come from")
    if record is None:
        note += nodes.paragraph(
            text="This example was not executed in this build, so its page shows its code "
            "without outputs."
        )
    else:
        env = Environment(**record["environment"])
        note += nodes.paragraph(text=f"Produced by executing this example on {env.one_line()}.")
        if not env.has_gpu:
            note["classes"].append("pu-cpu-only")
            note += nodes.paragraph(text=CPU_ONLY_NOTE)
    section.insert(1, note)
    section.insert(2, claims_box(record, read_claims(example.claims)))


def claims_box(record: dict[str, Any] | None, claims: list[Claim]) -> nodes.container:
    """The "Checked on this run" box: each claim the example made, with its numbers.

    Renders as ``<div class="claims">`` headed by the count ("12 claims, all held") and
    holding one ``claim`` element per claim, with ``claim-pass`` when it held and
    ``claim-fail`` (and the words "did not hold on this machine") when it did not. A list
    longer than :data:`LONG_CLAIMS_LIST` gets the class ``claims-long``.
    """
    box = nodes.container(classes=["claims"])
    box += nodes.paragraph("", "", nodes.strong(text=CLAIMS_TITLE), classes=["claims-title"])
    if record is None:
        box += nodes.paragraph(
            text="This example was not executed in this build, so nothing on its page was checked."
        )
        return box
    if not Environment(**record["environment"]).has_gpu:
        box["classes"].append("claims-no-gpu")
        box += nodes.paragraph(text=NO_GPU_CLAIMS_NOTE)
    if not claims:
        box += nodes.paragraph(text="This run checked no claims.")
        return box
    failed = sum(not made.holds for made in claims)
    count = f"{len(claims)} claim{'s' if len(claims) != 1 else ''}"
    box[0] += nodes.Text(
        f": {count}, all held" if not failed else f": {count}, {failed} did not hold"
    )
    items = nodes.bullet_list(classes=["claims-list"])
    if len(claims) > LONG_CLAIMS_LIST:
        items["classes"].append("claims-long")
    for made in claims:
        state = "claim-pass" if made.holds else "claim-fail"
        line = nodes.paragraph()
        line += nodes.Text(made.statement)
        if not made.holds:
            box["classes"].append("claims-failed")
            line += nodes.Text(": ")
            line += nodes.strong(text="did not hold on this machine")
        numbers = made.numbers_text()
        if numbers:
            line += nodes.Text(" ")
            line += nodes.inline(text=f"({numbers})", classes=["claim-numbers"])
        items += nodes.list_item("", line, classes=["claim", state])
    box += items
    return box


def _index_examples(app: Sphinx, docname: str) -> list[Example] | None:
    """The examples that the page ``docname`` lists, if it is an index of the gallery.

    The gallery's own index lists all of them; a section's index, those of its section.
    ``None`` when ``docname`` is no index of the gallery.
    """
    src_dir = Path(app.srcdir).resolve()
    conf = app.config.sphinx_gallery_conf
    examples = gallery_examples(src_dir, conf)
    for examples_dir, gallery_dir in _gallery_pairs(src_dir, conf):
        if (gallery_dir / "index").relative_to(src_dir).as_posix() == docname:
            return [e for e in examples if gallery_dir in (e.page_dir, *e.page_dir.parents)]
        for section in sorted(p for p in examples_dir.iterdir() if p.is_dir()):
            page_dir = gallery_dir / section.name
            if (page_dir / "index").relative_to(src_dir).as_posix() == docname:
                return [e for e in examples if e.page_dir == page_dir]
    return None


def _add_cpu_only_note(app: Sphinx, doctree: nodes.document, examples: list[Example]) -> None:
    records = []
    for example in examples:
        app.env.note_dependency(str(example.record))
        records.append(read_record(example))
    ran = [Environment(**r["environment"]) for r in records if r is not None]
    section = doctree.next_node(nodes.section)
    if section is None or all(env.has_gpu for env in ran):
        return
    note = nodes.admonition(classes=["pu-provenance", "pu-cpu-only"])
    note += nodes.title(text="This build had no GPU")
    note += nodes.paragraph(text=GALLERY_CPU_ONLY_NOTE)
    section.insert(1, note)


def _check_claims(app: Sphinx, exception: Exception | None) -> None:
    """Fail a GPU build in which an example made no claim; list claims that did not hold.

    A failed claim in the default strict mode raised in its example, which sphinx-gallery
    reports and fails the build for; in report mode (``PROFILING_UTILS_CLAIMS=report``) the
    build carries on, and each failed claim, and each example without claims, gets a warning
    line here, at the end of the log.
    """
    conf = app.config.sphinx_gallery_conf
    failing = {Path(p).resolve() for p in conf.get("failing_examples", {})}
    unclaimed = []
    for example in gallery_examples(Path(app.srcdir), conf):
        record = read_record(example)
        if record is None:
            continue
        claims = read_claims(example.claims)
        for made in claims:
            if not made.holds and made.mode == REPORT:
                logger.warning(
                    "%s; marked on its page (%s=report)",
                    made.failure_line(),
                    CLAIMS_MODE_ENV,
                    type="gallery_runs",
                    subtype="claim_failed",
                )
        has_gpu = Environment(**record["environment"]).has_gpu
        if has_gpu and not claims and example.source.resolve() not in failing:
            unclaimed.append(example.source.name)
    if exception is not None or not unclaimed:
        return
    message = (
        "gallery_runs: these examples ran on a GPU and checked no claim; state what their "
        "prose says about the run with profiling_utils.claims.claim(): " + ", ".join(unclaimed)
    )
    if claims_mode() == REPORT:
        logger.warning(message, type="gallery_runs", subtype="no_claims")
    else:
        raise ExtensionError(message)


class GalleryProvenance(SphinxDirective):
    """``gallery-provenance``: the machines that produced the gallery's outputs, one line each."""

    def run(self) -> list[nodes.Node]:
        examples = gallery_examples(Path(self.env.srcdir), self.config.sphinx_gallery_conf)
        groups: dict[str, list[Environment]] = {}
        for example in examples:
            self.env.note_dependency(str(example.record))
            record = read_record(example)
            if record is not None:
                env = Environment(**record["environment"])
                key = json.dumps({**env.as_dict(), "date": None}, sort_keys=True)
                groups.setdefault(key, []).append(env)
        for page_dir in {e.page_dir for e in examples}:
            self.env.note_dependency(str(page_dir))  # a record added or removed
        box = nodes.admonition(classes=["pu-provenance"])
        box += nodes.title(text="Where the outputs on this site come from")
        if not groups:
            box += nodes.paragraph(text="The examples were not executed in this build.")
            return [box]
        items = nodes.bullet_list()
        for runs in groups.values():
            dates = sorted({r.date for r in runs})
            when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
            summary = Environment(**{**runs[0].as_dict(), "date": when}).one_line()
            count = f"{len(runs)} of {len(examples)} example{'s' if len(examples) > 1 else ''}"
            items += nodes.list_item("", nodes.paragraph(text=f"{count}: {summary}."))
        box += nodes.paragraph(
            text="Every table, timeline and number in the tutorials was produced by executing "
            "the examples on:"
        )
        box += items
        if any(not runs[0].has_gpu for runs in groups.values()):
            box["classes"].append("pu-cpu-only")
            box += nodes.paragraph(
                text="This build had no GPU: the examples ran on the CPU, so their traces "
                "have no GPU lanes. The published site is built on a GPU."
            )
        return [box]


def setup(app: Sphinx) -> dict[str, Any]:
    app.setup_extension("sphinx_gallery.gen_gallery")
    # Before sphinx-gallery's own builder-inited handler (priority 500) reads its cache.
    app.connect("builder-inited", _before_gallery, priority=400)
    app.connect("doctree-read", _add_provenance)
    app.connect("build-finished", _publish_traces)
    # After sphinx-gallery's summary of failing examples (priority 500), which comes first.
    app.connect("build-finished", _check_claims, priority=600)
    app.add_directive("gallery-provenance", GalleryProvenance)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
