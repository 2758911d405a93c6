"""The site loads no script, stylesheet or font from another site.

Two places could break that rule without anyone noticing, so both are warnings (errors in
``nox -s docs``, which passes ``-W``):

- Math markup (``:math:`2n^3```, ``.. math::``) would make Sphinx load MathJax from a CDN on
  that page. This extension is the site's math renderer instead: it shows the markup as
  code and warns; write the formula as text (``2n³``, ``α·A·B + β·C``).
- After the build, every HTML page is checked for a ``<script src>`` or a ``<link href>`` on
  another host (a theme or an extension adding one, sphinx-gallery's timing pages, ...).
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

RENDERER = "no_external_script"
MATH_ADVICE = (
    "math markup would load MathJax from another site; write the formula as text "
    "(for example 2n³ or α·A·B + β·C)"
)
EXTERNAL = re.compile(
    r"<(?:script|link)\b[^>]*\b(?:src|href)=[\"']((?:https?:)?//[^\"']+)[\"'][^>]*>", re.I
)


def external_assets(page: str) -> list[str]:
    """URLs of scripts, stylesheets, fonts and icons that ``page`` would load from elsewhere.

    Links a reader follows (``<a href>``) are not loads and are not reported.
    """
    return [match.group(1) for match in EXTERNAL.finditer(page)]


def _math_as_code(self: Any, node: nodes.Element) -> None:
    logger.warning(MATH_ADVICE, location=node)
    self.body.append(f'<code class="math">{html.escape(node.astext())}</code>')
    raise nodes.SkipNode


def _check_pages(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    for path in sorted(Path(app.outdir).rglob("*.html")):
        for url in external_assets(path.read_text(encoding="utf-8")):
            logger.warning(
                "%s loads %s from another site", path.relative_to(app.outdir).as_posix(), url
            )


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_html_math_renderer(
        RENDERER, inline_renderers=(_math_as_code, None), block_renderers=(_math_as_code, None)
    )
    app.connect("build-finished", _check_pages)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
