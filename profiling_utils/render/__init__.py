"""What an executed example puts on its page: timelines, tables, trace downloads, Perfetto.

- :mod:`~profiling_utils.render.timeline`: timeline images of a trace (matplotlib).
- :mod:`~profiling_utils.render.charts`: charts of a page's measurements (matplotlib).
- :mod:`~profiling_utils.render.html`: the profiler table and the cheatsheet findings as HTML.
- :mod:`~profiling_utils.render.tables`: small HTML tables of a page's measured values.
- :mod:`~profiling_utils.render.steps`: a chart of per-step timings, one bar per step.
- :mod:`~profiling_utils.render.ranks`: one step of several ranks on one clock.
- :mod:`~profiling_utils.render.listings`: text that fits a page's output box (a span tree,
  a step's GPU work, an excerpt of generated code, a command's folded output).
- :mod:`~profiling_utils.render.perfetto`: where an example writes its traces so the site
  publishes them, and a download link with an "Open in Perfetto" button for each.

Example::

    from profiling_utils import capture
    from profiling_utils.render import profiler_table, trace_dir, trace_links

    run = capture(step, name="512_bf16_warm_eager", out_dir=trace_dir())
    profiler_table(run)   # last expression of a cell: an HTML table on the page
    trace_links(run)      # in a later cell: download link + "Open in Perfetto"
"""

from .charts import plot_size_sweep
from .html import HtmlFragment, findings_table, profiler_table
from .listings import fold_lines, gpu_work_listing, source_excerpt, span_tree
from .perfetto import TraceLinks, trace_dir, trace_links
from .ranks import plot_rank_step
from .steps import plot_per_step
from .tables import value_table
from .timeline import Highlight, highlight_between, highlight_span, plot_timeline

__all__ = [
    "Highlight",
    "HtmlFragment",
    "TraceLinks",
    "findings_table",
    "fold_lines",
    "gpu_work_listing",
    "highlight_between",
    "highlight_span",
    "plot_per_step",
    "plot_rank_step",
    "plot_size_sweep",
    "plot_timeline",
    "profiler_table",
    "source_excerpt",
    "span_tree",
    "trace_dir",
    "trace_links",
    "value_table",
]
