"""Pages that moved keep their old address: a small page there sends the reader on.

``conf.py`` lists them in ``moved_pages``, old document name to new one, without suffix
(``"auto_examples/plot_02_cold_start": "auto_examples/part1_matmul_add/plot_02_cold_start"``).
After an HTML build, each old address gets a page of its own that

- names the new page as the canonical one (``<link rel="canonical">``), for search engines;
- sends the browser there at once (``<meta http-equiv="refresh">``), and a line of inline
  script does the same keeping the ``#section`` of the old link;
- links the new page, for a reader whose browser does neither.

Links are relative, so the site works wherever it is served. A redirect whose new page is
not a page of this build, or whose old address is still one, is a warning (an error in
``nox -s docs``, which passes ``-W``).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.osutil import relative_uri

logger = logging.getLogger(__name__)

CONFIG = "moved_pages"


def redirect_page(target: str, title: str) -> str:
    """The HTML of a page that sends its reader to ``target``, a URL relative to it."""
    href = html.escape(target, quote=True)
    text = html.escape(title)
    # No "<" in the script, so that nothing in the target can end it early.
    script = json.dumps(target).replace("<", "\\u003c")
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n'
        "<head>\n"
        '<meta charset="utf-8">\n'
        f"<title>Moved: {text}</title>\n"
        f'<link rel="canonical" href="{href}">\n'
        f'<meta http-equiv="refresh" content="0; url={href}">\n'
        f"<script>location.replace({script} + location.hash)</script>\n"
        "</head>\n"
        "<body>\n"
        f'<p>This page has moved to <a href="{href}">{text}</a>.</p>\n'
        "</body>\n"
        "</html>\n"
    )


def _write_redirects(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    builder = app.builder
    found = app.env.found_docs
    for old, new in sorted(getattr(app.config, CONFIG).items()):
        if new not in found:
            logger.warning(
                "redirect from %s: %s is not a page of this build", old, new, type="redirects"
            )
            continue
        if old in found:
            logger.warning(
                "redirect from %s: that is still a page of this build, not replaced",
                old,
                type="redirects",
            )
            continue
        target = relative_uri(builder.get_target_uri(old), builder.get_target_uri(new))
        title = app.env.titles[new].astext() if new in app.env.titles else new
        path = Path(builder.get_outfilename(old))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(redirect_page(target, title), encoding="utf-8")


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value(CONFIG, {}, "html", types=(dict,))
    app.connect("build-finished", _write_redirects)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
