"""profiling_utils: capture, load, measure, diagnose and render PyTorch profiler traces."""

from . import measures
from .capture import Capture, capture, run_name
from .errors import TraceError
from .peaks import Peaks, achieved_gb_s, achieved_tflops, gemm_flops, measure_peaks
from .provenance import environment
from .trace import DeviceInfo, Lane, Span, Step, Trace, load_trace

__all__ = [
    "Capture",
    "DeviceInfo",
    "Lane",
    "Peaks",
    "Span",
    "Step",
    "Trace",
    "TraceError",
    "achieved_gb_s",
    "achieved_tflops",
    "capture",
    "environment",
    "gemm_flops",
    "load_trace",
    "measure_peaks",
    "measures",
    "run_name",
]
