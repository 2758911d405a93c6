"""The docs build's gallery bookkeeping (docs/_ext/gallery_runs.py), without running Sphinx."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "docs" / "_ext"))

import gallery_runs  # noqa: E402
from gallery_runs import Example  # noqa: E402

from profiling_utils.claims import CLAIMS_FILE_ENV  # noqa: E402
from profiling_utils.render import perfetto, trace_dir  # noqa: E402


def _package(root: Path) -> Path:
    package = root / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("x = 1\n")
    (package / "sub" / "mod.py").write_text("y = 2\n")
    return package


def test_package_digest_follows_sources_and_ignores_caches(tmp_path: Path) -> None:
    package = _package(tmp_path)
    before = gallery_runs.package_digest(package)
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\0\1")
    (package / ".mod.py.swp").write_text("editor")
    assert gallery_runs.package_digest(package) == before
    (package / "sub" / "mod.py").write_text("y = 3\n")
    changed = gallery_runs.package_digest(package)
    assert changed != before
    (package / "sub" / "new.py").write_text("")
    assert gallery_runs.package_digest(package) not in (before, changed)


def test_fingerprint_parts_name_the_library_torch_cuda_and_gpu(tmp_path: Path) -> None:
    import torch

    parts = gallery_runs.fingerprint_parts(_package(tmp_path))
    assert parts["torch"] == torch.__version__
    assert parts["cuda"] == torch.version.cuda
    expected_gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    assert parts["gpu"] == expected_gpu
    assert parts["profiling_utils"] == gallery_runs.package_digest(tmp_path / "pkg")


@pytest.mark.parametrize("part", ["profiling_utils", "torch", "cuda", "gpu"])
def test_fingerprint_changes_with_each_part(part: str) -> None:
    parts = {"profiling_utils": "abc", "torch": "2.11.0+cu130", "cuda": "13.0", "gpu": "H100"}
    assert gallery_runs.fingerprint(dict(parts)) == gallery_runs.fingerprint(parts)
    assert gallery_runs.fingerprint({**parts, part: "other"}) != gallery_runs.fingerprint(parts)


def _cached_example(tmp_path: Path, name: str, fingerprint: str | None) -> Example:
    source = tmp_path / "examples" / f"{name}.py"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text("print(1)\n")
    example = Example(source=source, page_dir=tmp_path / "docs" / "auto_examples")
    example.page_dir.mkdir(parents=True, exist_ok=True)
    example.md5.write_text("0123")
    if fingerprint is not None:
        example.record.write_text(json.dumps({"fingerprint": fingerprint}))
    return example


def test_invalidate_stale_removes_the_md5_of_examples_from_another_run(tmp_path: Path) -> None:
    current = _cached_example(tmp_path, "plot_a", "now")
    other = _cached_example(tmp_path, "plot_b", "before")
    unrecorded = _cached_example(tmp_path, "plot_c", None)
    never_ran = _cached_example(tmp_path, "plot_d", "before")
    never_ran.md5.unlink()

    failed = _cached_example(tmp_path, "plot_e", "now")
    claim = {"numbers": {}, "example": "plot_e.py", "mode": "report"}
    failed.claims.write_text(
        json.dumps({**claim, "statement": "held", "holds": True})
        + "\n"
        + json.dumps({**claim, "statement": "did not", "holds": False})
        + "\n"
    )
    current.claims.write_text(json.dumps({**claim, "statement": "held", "holds": True}) + "\n")

    stale = gallery_runs.invalidate_stale([current, other, unrecorded, never_ran, failed], "now")

    assert stale == [other, unrecorded, failed]
    assert current.md5.exists()
    assert not other.md5.exists() and not unrecorded.md5.exists() and not failed.md5.exists()


@pytest.mark.parametrize(
    ("code", "lines"),
    [
        ("import sys\nsys.exit(0)\n", [2]),
        ("exit()\nquit(1)\n", [1, 2]),
        ("import os\nif True:\n    os._exit(3)\n", [3]),
        ("raise SystemExit\n", [1]),
        ("raise SystemExit(2)\n", [1]),
        ("import sys\nprint(sys.exc_info())\nraise RuntimeError('no GPU')\n", []),
    ],
)
def test_exit_calls_finds_every_way_out_of_the_interpreter(
    tmp_path: Path, code: str, lines: list[int]
) -> None:
    source = tmp_path / "plot_x.py"
    source.write_text(code)
    assert gallery_runs.exit_calls(source) == lines


def test_gallery_examples_pairs_each_plot_file_with_its_page_folder(tmp_path: Path) -> None:
    (tmp_path / "examples" / "sub").mkdir(parents=True)
    for name in ("plot_02_b.py", "plot_01_a.py", "helper.py", "sub/plot_03_c.py"):
        (tmp_path / "examples" / name).write_text("")
    conf = {"examples_dirs": "../examples", "gallery_dirs": "auto_examples"}
    examples = gallery_runs.gallery_examples(tmp_path / "docs", conf)
    assert [e.name for e in examples] == ["plot_01_a", "plot_02_b", "plot_03_c"]
    gallery = (tmp_path / "docs" / "auto_examples").resolve()
    assert [e.page_dir for e in examples] == [gallery, gallery, gallery / "sub"]
    assert examples[2].trace_dir == gallery / "sub" / "traces" / "plot_03_c"


def test_what_examples_no_longer_in_the_gallery_left_is_removed(tmp_path: Path) -> None:
    # plot_a moved from the top of the gallery into section "part1"; plot_b was deleted.
    (tmp_path / "examples" / "part1").mkdir(parents=True)
    (tmp_path / "examples" / "part1" / "plot_a.py").write_text("")
    gallery = tmp_path / "docs" / "auto_examples"
    kept = [
        "index.rst",
        "images/thumb/sphx_glr_plot_a_thumb.png",
        "part1/index.rst",
        "part1/plot_a.rst",
        "part1/plot_a.py.md5",
        "part1/plot_a.run.json",
        "part1/traces/plot_a/plot_a_steps.json.gz",
    ]
    left = [
        "plot_a.rst",
        "plot_a.py",
        "plot_a.py.md5",
        "plot_a.ipynb",
        "plot_a.codeobj.json",
        "plot_a.run.json",
        "plot_a.claims.json",
        "part1/plot_b.rst",
        "part1/plot_b.zip",
    ]
    for name in [*kept, *left, "traces/plot_a/trace.json.gz", "part1/traces/plot_b/t.json"]:
        (gallery / name).parent.mkdir(parents=True, exist_ok=True)
        (gallery / name).write_text("")
    conf = {"examples_dirs": "../examples", "gallery_dirs": "auto_examples"}
    gallery = gallery.resolve()
    expected = sorted(
        [gallery / n for n in left] + [gallery / "traces/plot_a", gallery / "part1/traces/plot_b"]
    )

    assert sorted(gallery_runs.outputs_without_example(tmp_path / "docs", conf)) == expected
    removed = gallery_runs.remove_outputs_without_example(tmp_path / "docs", conf)

    assert sorted(removed) == expected
    assert not any(p.exists() for p in expected)
    assert all((gallery / name).is_file() for name in kept)
    assert gallery_runs.outputs_without_example(tmp_path / "docs", conf) == []


def test_reset_example_publishes_an_empty_trace_dir_and_records_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(perfetto.TRACE_DIR_ENV, raising=False)
    monkeypatch.delenv(perfetto.PAGE_DIR_ENV, raising=False)
    monkeypatch.delenv(CLAIMS_FILE_ENV, raising=False)
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "plot_01_a.py").write_text("")
    conf = {
        "src_dir": str(tmp_path / "docs"),
        "examples_dirs": "../examples",
        "gallery_dirs": "auto_examples",
    }
    (example,) = gallery_runs.gallery_examples(tmp_path / "docs", conf)
    example.trace_dir.mkdir(parents=True)
    (example.trace_dir / "old.json.gz").write_bytes(b"left from the last run")
    example.claims.write_text('{"statement": "left from the last run"}\n')

    gallery_runs.reset_example(conf, "plot_01_a.py", when="before")

    assert trace_dir() == example.trace_dir
    assert os.environ[perfetto.PAGE_DIR_ENV] == str(example.page_dir)
    assert list(example.trace_dir.iterdir()) == []
    record = gallery_runs.read_record(example)
    assert record["example"] == "plot_01_a.py"
    assert record["fingerprint"] == gallery_runs.fingerprint(record["fingerprint_parts"])
    assert record["fingerprint_parts"] == gallery_runs.fingerprint_parts()
    assert set(record["environment"]) >= {"gpu", "driver", "cuda", "torch", "date"}
    assert os.environ[CLAIMS_FILE_ENV] == str(example.claims)
    assert example.claims.read_text() == ""  # claims of an earlier run are gone

    gallery_runs.reset_example(conf, "plot_01_a.py", when="after")
    assert trace_dir() == Path("traces")
    assert perfetto.PAGE_DIR_ENV not in os.environ
    assert CLAIMS_FILE_ENV not in os.environ


@pytest.mark.parametrize("plot_gallery", [True, False])
def test_only_a_build_that_executes_examples_drops_stale_outputs(
    tmp_path: Path, plot_gallery: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    monkeypatch.delenv("PYTHONPATH", raising=False)  # restored after _before_gallery sets it

    example = _cached_example(tmp_path, "plot_a", "made with another torch")
    conf = {
        "examples_dirs": "../examples",
        "gallery_dirs": "auto_examples",
        "plot_gallery": plot_gallery,
    }
    config = SimpleNamespace(sphinx_gallery_conf=conf)
    app = SimpleNamespace(srcdir=tmp_path / "docs", config=config)
    gallery_runs._before_gallery(app)
    # A build that executes nothing (plot_gallery off) could not remake what it dropped.
    assert example.md5.exists() == (not plot_gallery)


def test_processes_started_by_examples_import_the_builds_profiling_utils(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    import profiling_utils

    monkeypatch.setenv("PYTHONPATH", "elsewhere")
    gallery_runs.share_import_path()
    gallery_runs.share_import_path()  # once only
    root = str(Path(profiling_utils.__file__).resolve().parents[1])
    assert os.environ["PYTHONPATH"] == os.pathsep.join([root, "elsewhere"])
    child = subprocess.run(
        [sys.executable, "-c", "import profiling_utils; print(profiling_utils.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert child.stdout.strip() == profiling_utils.__file__
