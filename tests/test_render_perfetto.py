"""Trace download links and the Perfetto button markup (profiling_utils.render.perfetto)."""

from __future__ import annotations

import gzip
import html
from pathlib import Path

import pytest

from profiling_utils.render import perfetto, trace_dir, trace_links


def _write_trace(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    return path


@pytest.fixture
def outside_docs_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(perfetto.TRACE_DIR_ENV, raising=False)
    monkeypatch.delenv(perfetto.PAGE_DIR_ENV, raising=False)


def test_outside_a_docs_build_traces_go_to_traces_and_links_are_relative(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outside_docs_build: None
) -> None:
    monkeypatch.chdir(tmp_path)
    assert trace_dir() == Path("traces")
    path = _write_trace(trace_dir() / "64_bf16_cold_eager.json.gz")
    links = trace_links(path)
    assert links.href == "traces/64_bf16_cold_eager.json.gz"
    assert links.title == "64_bf16_cold_eager"
    assert links.size_bytes == path.stat().st_size


def test_in_a_docs_build_links_are_relative_to_the_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page_dir = tmp_path / "auto_examples"
    published = page_dir / "traces" / "plot_01_cold"
    monkeypatch.setenv(perfetto.PAGE_DIR_ENV, str(page_dir))
    monkeypatch.setenv(perfetto.TRACE_DIR_ENV, str(published))
    monkeypatch.chdir(tmp_path)  # examples run in their source folder, not the page's
    path = _write_trace(trace_dir() / "a.json.gz")

    class FakeCapture:
        trace_path = path

    links = trace_links(FakeCapture(), title="cold start")
    assert links.href == "traces/plot_01_cold/a.json.gz"
    assert links.title == "cold start"


def test_in_a_docs_build_a_trace_outside_trace_dir_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(perfetto.PAGE_DIR_ENV, str(tmp_path / "auto_examples"))
    monkeypatch.setenv(perfetto.TRACE_DIR_ENV, str(tmp_path / "auto_examples" / "traces" / "x"))
    stray = _write_trace(tmp_path / "elsewhere" / "a.json.gz")
    with pytest.raises(ValueError, match="not under trace_dir"):
        trace_links(stray)


def test_missing_trace_is_an_error(tmp_path: Path, outside_docs_build: None) -> None:
    with pytest.raises(FileNotFoundError):
        trace_links(tmp_path / "nope.json.gz")


def test_markup_has_escaped_link_hidden_button_and_manual_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outside_docs_build: None
) -> None:
    monkeypatch.chdir(tmp_path)
    path = _write_trace(Path("traces") / 'a&b"<c>.json.gz')
    markup = trace_links(path)._repr_html_()
    escaped = html.escape('traces/a&b"<c>.json.gz', quote=True)
    assert f'href="{escaped}"' in markup and f'data-trace-href="{escaped}"' in markup
    assert 'download="a&amp;b&quot;&lt;c&gt;.json.gz"' in markup
    assert '<button type="button" class="pu-perfetto-open" hidden>' in markup
    assert "drop the downloaded file" in markup  # the text shown when the script is absent
    assert "<script" not in markup
