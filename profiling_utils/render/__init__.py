"""Rendering of traces for the documentation pages."""

from .timeline import Highlight, highlight_between, highlight_span, plot_timeline

__all__ = ["Highlight", "highlight_between", "highlight_span", "plot_timeline"]
