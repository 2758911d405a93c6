"""Pages that moved keep their old address (docs/_ext/redirects.py)."""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "docs" / "_ext"))

import redirects  # noqa: E402

CONF = f"""
import sys
sys.path.insert(0, {str(ROOT / "docs" / "_ext")!r})
extensions = ["redirects"]
exclude_patterns = ["_build"]
moved_pages = {{
    "gallery/plot_a": "gallery/part1/plot_a",
    "gallery/plot_gone": "gallery/part1/plot_gone",
    "index_twice": "index",
    "index": "gallery/part1/plot_a",
}}
"""
INDEX = "Site\n====\n\n.. toctree::\n\n   gallery/part1/plot_a\n   index_twice\n"
PAGE = "Plot A: a <question>\n====================\n\nText.\n\nA section\n---------\n\nMore.\n"


def test_a_redirect_page_names_the_new_page_three_ways() -> None:
    page = redirects.redirect_page("part1/plot_a.html", "Plot A & B")
    assert '<link rel="canonical" href="part1/plot_a.html">' in page
    assert '<meta http-equiv="refresh" content="0; url=part1/plot_a.html">' in page
    assert '<script>location.replace("part1/plot_a.html" + location.hash)</script>' in page
    assert '<a href="part1/plot_a.html">Plot A &amp; B</a>' in page


def test_a_target_cannot_break_out_of_the_page() -> None:
    page = redirects.redirect_page('x.html"></script><script>alert(1)</script>', "t")
    assert page.count("<script>") == 1 and page.count("</script>") == 1
    assert 'href="x.html&quot;&gt;' in page


def test_the_build_writes_a_page_at_each_old_address(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "gallery" / "part1").mkdir(parents=True)
    (docs / "conf.py").write_text(CONF)
    (docs / "index.rst").write_text(INDEX)
    (docs / "index_twice.rst").write_text("Twice\n=====\n")
    (docs / "gallery" / "part1" / "plot_a.rst").write_text(PAGE)
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", str(docs), str(tmp_path / "html")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    old = tmp_path / "html" / "gallery" / "plot_a.html"
    page = old.read_text()
    assert '<link rel="canonical" href="part1/plot_a.html">' in page
    assert '<a href="part1/plot_a.html">Plot A: a &lt;question&gt;</a>' in page
    target = re.search(r'<a href="([^"]+)"', page).group(1)
    assert (old.parent / html.unescape(target)).is_file()
    # Warnings, not pages: a target that is not a page, an old address that still is one.
    assert "redirect from gallery/plot_gone: gallery/part1/plot_gone is not a page" in (
        result.stderr
    )
    assert not (tmp_path / "html" / "gallery" / "plot_gone.html").exists()
    assert "redirect from index: that is still a page of this build" in result.stderr
    assert "redirect from index_twice: that is still a page" in result.stderr
    assert "Site" in (tmp_path / "html" / "index.html").read_text()
