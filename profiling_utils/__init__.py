"""profiling_utils: capture, load, measure, diagnose and render PyTorch profiler traces."""

from . import measures
from .capture import Capture, capture, run_name
from .errors import TraceError
from .provenance import environment
from .trace import DeviceInfo, Lane, Span, Step, Trace, load_trace

__all__ = [
    "Capture",
    "DeviceInfo",
    "Lane",
    "Span",
    "Step",
    "Trace",
    "TraceError",
    "capture",
    "environment",
    "load_trace",
    "measures",
    "run_name",
]
