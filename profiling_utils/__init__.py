"""profiling_utils: capture, load, measure, diagnose and render PyTorch profiler traces."""

from . import measures
from .capture import Capture, capture, run_name
from .compare import Comparison, compare
from .errors import TraceError
from .peaks import Peaks, achieved_gb_s, achieved_tflops, gemm_flops, measure_peaks
from .provenance import environment
from .rules import Finding, diagnose
from .trace import DeviceInfo, Lane, Span, Step, Trace, load_trace

__all__ = [
    "Capture",
    "Comparison",
    "DeviceInfo",
    "Finding",
    "Lane",
    "Peaks",
    "Span",
    "Step",
    "Trace",
    "TraceError",
    "achieved_gb_s",
    "achieved_tflops",
    "capture",
    "compare",
    "environment",
    "diagnose",
    "gemm_flops",
    "load_trace",
    "measure_peaks",
    "measures",
    "run_name",
]
