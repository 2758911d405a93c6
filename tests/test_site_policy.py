"""The site loads nothing from another site (docs/_ext/site_policy.py), without Sphinx."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "docs" / "_ext"))

from site_policy import external_assets  # noqa: E402


def test_scripts_and_stylesheets_from_other_hosts_are_found() -> None:
    page = """
    <link rel="stylesheet" href="_static/furo.css">
    <script src="_static/perfetto.js" defer></script>
    <script defer="defer" src="https://cdn.jsdelivr.net/npm/mathjax@4/tex-mml-chtml.js"></script>
    <link href='//fonts.googleapis.com/css?family=Roboto' rel='stylesheet'>
    <SCRIPT SRC="http://code.jquery.com/jquery.js"></SCRIPT>
    """
    assert external_assets(page) == [
        "https://cdn.jsdelivr.net/npm/mathjax@4/tex-mml-chtml.js",
        "//fonts.googleapis.com/css?family=Roboto",
        "http://code.jquery.com/jquery.js",
    ]


def test_links_a_reader_follows_are_not_loads() -> None:
    page = '<a href="https://ui.perfetto.dev">Perfetto</a><a href="https://huggingface.co/blog">'
    assert external_assets(page) == []
