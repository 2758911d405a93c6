"""Claims in the docs build: the "Checked on this run" box, and a build that fails or reports.

A throwaway gallery is built with sphinx-build in a temporary folder, with only sphinx-gallery
and ``docs/_ext/gallery_runs.py`` (no theme, no prose pages), the way ``docs/conf.py`` wires
them: a raising example fails the build once every example has run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "docs" / "_ext"))

import gallery_runs  # noqa: E402
from gallery_runs import Example  # noqa: E402
from sphinx.errors import ExtensionError  # noqa: E402

CONF = f"""
import sys
sys.path.insert(0, {str(ROOT / "docs" / "_ext")!r})
extensions = ["sphinx_gallery.gen_gallery", "gallery_runs"]
exclude_patterns = ["_build"]
sphinx_gallery_conf = {{
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "image_scrapers": (),
    "reset_modules": ("gallery_runs.reset_example",),
    "reset_modules_order": "both",
    "abort_on_example_error": False,
    "only_warn_on_example_error": False,
    "write_computation_times": False,
    "download_all_examples": False,
    "show_signature": False,
}}
"""
INDEX = "Site\n====\n\n.. toctree::\n\n   auto_examples/index\n"
HEADER = "Gallery\n=======\n\nThe examples.\n"

HOLDS = '''"""
Holds
=====

A page whose claim holds.
"""

from profiling_utils.claims import claim

widths = [219.4, 92.0, 83.1]
claim("the first step is the widest", widths[0] > max(widths[1:]), first_us=widths[0],
      widest_other_us=max(widths[1:]))
'''
FAILS = '''"""
Fails
=====

A page whose claim does not hold.
"""

from profiling_utils.claims import claim

claim("the first step is the widest", 80.0 > 92.0, first_us=80.0, widest_other_us=92.0)
print("carried", "on")
'''
SILENT = '''"""
Silent
======

A page that checks nothing.
"""

print("no claims")
'''


@dataclass
class Build:
    returncode: int
    log: str
    html: Path
    docs: Path

    def page(self, name: str) -> str:
        return (self.html / "auto_examples" / f"{name}.html").read_text()


def build(work: Path, examples: dict[str, str], **env: str) -> Build:
    docs = work / "docs"
    docs.mkdir(parents=True)
    (docs / "conf.py").write_text(CONF)
    (docs / "index.rst").write_text(INDEX)
    (work / "examples").mkdir()
    (work / "examples" / "GALLERY_HEADER.rst").write_text(HEADER)
    for name, source in examples.items():
        (work / "examples" / name).write_text(source)
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("PROFILING_UTILS_")}
    child_env["PYTHONPATH"] = os.pathsep.join([str(ROOT), child_env.get("PYTHONPATH", "")])
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", str(docs), str(work / "html")],
        capture_output=True,
        text=True,
        timeout=600,
        env={**child_env, **env},
    )
    return Build(result.returncode, result.stdout + result.stderr, work / "html", docs)


def claim_items(page: str) -> list[tuple[str, str]]:
    """(classes, text) of each claim element inside the page's claims box."""
    box = re.search(r'<div class="claims[^"]*">(.*?)</div>', page, re.S)
    assert box, "no claims box"
    items = re.findall(r'<li class="(claim [^"]*)">(.*?)</li>', box.group(1), re.S)
    return [(classes, re.sub(r"<[^>]+>", "", text).strip()) for classes, text in items]


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Build:
    examples = {"plot_a_holds.py": HOLDS, "plot_b_fails.py": FAILS, "plot_c_silent.py": SILENT}
    return build(tmp_path_factory.mktemp("strict"), examples)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Build:
    examples = {"plot_a_holds.py": HOLDS, "plot_b_fails.py": FAILS, "plot_c_silent.py": SILENT}
    return build(tmp_path_factory.mktemp("report"), examples, PROFILING_UTILS_CLAIMS="report")


def test_a_claim_that_holds_is_listed_with_its_numbers(strict: Build) -> None:
    assert claim_items(strict.page("plot_a_holds")) == [
        ("claim claim-pass", "the first step is the widest (first_us=219.4, widest_other_us=92.0)")
    ]
    assert "Checked on this run</strong>: 1 claim, all held" in strict.page("plot_a_holds")


def test_a_failed_claim_fails_the_build_with_one_line(strict: Build) -> None:
    assert strict.returncode != 0
    line = (
        "plot_b_fails.py: claim did not hold: the first step is the widest "
        "(first_us=80.0, widest_other_us=92.0)"
    )
    assert f"ClaimFailed: {line}" in strict.log
    # What the example prints after the claim ("carried on"; its code has "carried", "on").
    assert "carried on" not in strict.page("plot_b_fails")


def test_report_mode_marks_the_failed_claim_and_finishes(report: Build) -> None:
    assert report.returncode == 0, report.log[-4000:]
    assert claim_items(report.page("plot_b_fails")) == [
        (
            "claim claim-fail",
            "the first step is the widest: did not hold on this machine "
            "(first_us=80.0, widest_other_us=92.0)",
        )
    ]
    assert "carried on" in report.page("plot_b_fails")
    assert "Checked on this run</strong>: 1 claim, 1 did not hold" in report.page("plot_b_fails")
    warnings = [line for line in report.log.splitlines() if "claim did not hold" in line]
    assert len(warnings) == 1 and "WARNING" in warnings[0] and "plot_b_fails.py" in warnings[0]
    assert "PROFILING_UTILS_CLAIMS=report" in warnings[0]


def test_a_build_without_a_gpu_says_so_and_does_not_ask_for_claims(report: Build) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    silent = report.page("plot_c_silent")
    assert "This run checked no claims." in silent
    assert "claims about GPU work were not made or checked" in silent
    index = (report.html / "auto_examples" / "index.html").read_text()
    assert "This build had no GPU" in index and "ran on the CPU" in index


def _ran_example(tmp_path: Path, name: str, gpu: str | None, claims: list[dict]) -> Example:
    source = tmp_path / "examples" / f"{name}.py"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text("")
    example = Example(source=source, page_dir=tmp_path / "docs" / "auto_examples")
    example.page_dir.mkdir(parents=True, exist_ok=True)
    environment = {"gpu": gpu, "driver": None, "cuda": None, "torch": "2", "python": "3"}
    example.record.write_text(json.dumps({"environment": {**environment, "date": "2026"}}))
    example.claims.write_text("".join(json.dumps(c) + "\n" for c in claims))
    return example


def _app(tmp_path: Path, failing: list[Path] = ()) -> SimpleNamespace:
    conf = {
        "examples_dirs": "../examples",
        "gallery_dirs": "auto_examples",
        "failing_examples": {str(p): "traceback" for p in failing},
    }
    return SimpleNamespace(
        srcdir=tmp_path / "docs", config=SimpleNamespace(sphinx_gallery_conf=conf)
    )


def test_a_gpu_build_fails_for_an_example_that_checked_no_claim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PROFILING_UTILS_CLAIMS", raising=False)
    held = {
        "statement": "s",
        "holds": True,
        "numbers": {},
        "example": "plot_a.py",
        "mode": "strict",
    }
    _ran_example(tmp_path, "plot_a", "NVIDIA H100 80GB HBM3", [held])
    _ran_example(tmp_path, "plot_b", "NVIDIA H100 80GB HBM3", [])
    _ran_example(tmp_path, "plot_c", None, [])  # ran on the CPU: its GPU claims were not made
    with pytest.raises(ExtensionError, match=r"checked no claim.*: plot_b\.py$"):
        gallery_runs._check_claims(_app(tmp_path), None)
    monkeypatch.setenv("PROFILING_UTILS_CLAIMS", "report")
    warnings = []
    monkeypatch.setattr(gallery_runs.logger, "warning", lambda *a, **k: warnings.append(a[0]))
    gallery_runs._check_claims(_app(tmp_path), None)  # report mode carries on, and says so
    assert len(warnings) == 1 and warnings[0].endswith(": plot_b.py")


def test_an_example_that_raised_is_not_also_blamed_for_its_missing_claims(tmp_path: Path) -> None:
    raised = _ran_example(tmp_path, "plot_b", "NVIDIA H100 80GB HBM3", [])
    gallery_runs._check_claims(_app(tmp_path, failing=[raised.source]), None)


def test_reverse_order_runs_the_examples_last_to_first() -> None:
    names = ["plot_01_a.py", "plot_10_c.py", "plot_02_b.py"]
    key = gallery_runs.ReverseFileNameSortKey("examples")
    assert sorted(names, key=key) == ["plot_10_c.py", "plot_02_b.py", "plot_01_a.py"]


@pytest.mark.parametrize(
    ("order", "key"),
    [("", "FileNameSortKey"), ("reverse", "gallery_runs.ReverseFileNameSortKey")],
)
def test_docs_conf_picks_the_gallery_order_from_the_environment(
    order: str, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import runpy

    monkeypatch.setenv("PROFILING_UTILS_GALLERY_ORDER", order)
    conf = runpy.run_path(str(ROOT / "docs" / "conf.py"))
    assert conf["sphinx_gallery_conf"]["within_subsection_order"] == key
    monkeypatch.setenv("PROFILING_UTILS_GALLERY_ORDER", "random")
    with pytest.raises(ValueError, match="name, reverse"):
        runpy.run_path(str(ROOT / "docs" / "conf.py"))


def test_a_long_claims_list_is_marked_to_scroll_unless_one_failed() -> None:
    from gallery_runs import LONG_CLAIMS_LIST, claims_box

    from profiling_utils.claims import Claim

    environment = dict(gpu="H100", driver=None, cuda=None, torch="2.11", python="3.12", date="")
    record = {"environment": environment}
    many = [Claim(f"claim {i}", True, {}) for i in range(LONG_CLAIMS_LIST + 1)]
    few = many[:LONG_CLAIMS_LIST]
    assert "claims-long" in claims_box(record, many)[1]["classes"]
    assert "claims-long" not in claims_box(record, few)[1]["classes"]
    failed = claims_box(record, [*many[:-1], Claim("last", False, {})])
    # The stylesheet keeps a list with a failure unscrolled: the box is marked failed.
    assert "claims-failed" in failed["classes"]
    css = (Path(__file__).parents[1] / "docs/_static/site.css").read_text()
    assert ".claims:not(.claims-failed) ul.claims-list.claims-long" in css
