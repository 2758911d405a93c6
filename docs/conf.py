"""Sphinx configuration: furo, MyST prose pages, and the gallery executed from ../examples.

Build with ``nox -s docs`` (warnings are errors). The local extensions live in ``_ext/``:
``gallery_runs`` (run records, provenance, stale-output detection, trace publishing),
``reference_pages`` (the cheatsheet, API and CLI reference generated from the code),
``site_policy`` (nothing on a page is loaded from another site) and ``redirects`` (pages
that moved keep their old address).
"""

from __future__ import annotations

import logging
import os
import sys
from datetime import date
from pathlib import Path

DOCS = Path(__file__).parent
sys.path.insert(0, str(DOCS / "_ext"))

# myst-parser logs its whole configuration (one line of about 1,000 characters) at INFO on
# every build; its warnings and errors still pass.
logging.getLogger("sphinx.myst_parser.sphinx_ext.main").addFilter(
    lambda record: record.levelno >= logging.WARNING
)

project = "Reading PyTorch profiler traces"
author = "the profiling_utils contributors"
copyright = f"{date.today().year}, {author}"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx_gallery.gen_gallery",
    "gallery_runs",
    "reference_pages",
    "site_policy",
    "redirects",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_generated", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "furo"
html_title = project
html_static_path = ["_static"]
html_css_files = ["site.css"]
# Our own script only: nothing on these pages loads a script or a font from another site.
html_js_files = [("perfetto.js", {"defer": "defer"})]
html_favicon = "_static/favicon.svg"
html_math_renderer = "no_external_script"  # site_policy: math markup is refused, not MathJax
html_theme_options = {"navigation_with_keys": True}
pygments_style = "friendly"
pygments_dark_style = "monokai"

# The gallery has one section per part of the Hugging Face series, in this order; a folder
# of examples/ missing here fails the build (sphinx-gallery's explicit order).
GALLERY_SECTIONS = [
    "../examples/part1_matmul_add",
    "../examples/part2_linear_and_mlp",
    "../examples/part3_attention",
]

# The tutorials of Part 1 were published at auto_examples/<name>.html, before the gallery
# had sections: those addresses send the reader to the pages' new place (_ext/redirects.py).
moved_pages = {
    f"auto_examples/{name}": f"auto_examples/part1_matmul_add/{name}"
    for name in (
        "plot_00_quickstart",
        "plot_01_overhead_vs_compute",
        "plot_02_cold_start",
        "plot_03_warmup_and_schedule",
        "plot_04_buffer_request_and_offset",
        "plot_05_dispatch_chain",
        "plot_06_launch_planning",
        "plot_07_kernel_variance",
        "plot_08_torch_compile",
        "plot_09_diagnose_your_own_trace",
        "plot_10_gaps_inside_a_step",
        "plot_11_several_ranks",
    )
}

# PROFILING_UTILS_GALLERY_ORDER=reverse runs the examples last to first (the sections, and
# the examples within each), to check that no page depends on the examples that ran before
# it (docs/howto/rebuild-docs.md).
GALLERY_ORDER_ENV = "PROFILING_UTILS_GALLERY_ORDER"
GALLERY_ORDERS = {
    "name": "FileNameSortKey",
    "reverse": "gallery_runs.ReverseFileNameSortKey",
}
gallery_order = os.environ.get(GALLERY_ORDER_ENV) or "name"
if gallery_order not in GALLERY_ORDERS:
    raise ValueError(
        f"{GALLERY_ORDER_ENV} must be one of {', '.join(GALLERY_ORDERS)}, not {gallery_order!r}"
    )

sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "subsection_order": GALLERY_SECTIONS[:: -1 if gallery_order == "reverse" else 1],
    "within_subsection_order": GALLERY_ORDERS[gallery_order],
    # matplotlib figures (the timelines) at 1x and 2x, so they are sharp on high-DPI screens.
    "image_scrapers": ("matplotlib",),
    "image_srcset": ["2x"],
    # gallery_runs.reset_example empties each example's trace folder, points trace_dir() at
    # it and writes the run record before the example runs.
    "reset_modules": ("matplotlib", "gallery_runs.reset_example"),
    "reset_modules_order": "both",
    "capture_repr": ("_repr_html_", "__repr__"),
    # A cell ending in plot_timeline(...) shows the figure, not also "<Figure size ...>";
    # one ending in claim(...) shows the line the claim printed, not also its repr.
    "ignore_repr_types": (
        r"matplotlib\.(figure|axes|text|collections|lines|patches)|profiling_utils\.claims\.Claim"
    ),
    # An example that raises fails the build (non-zero status) once all examples have run.
    "abort_on_example_error": False,
    "only_warn_on_example_error": False,
    # sg_execution_times pages load jQuery and DataTables from CDNs.
    "write_computation_times": False,
    "remove_config_comments": True,
    "download_all_examples": False,
    "show_signature": False,
}
