"""profiling_utils: capture, load, measure, diagnose and render PyTorch profiler traces.

The names below are imported on first use (PEP 562), not with the package: the command line
(``python -m profiling_utils``) then loads only what its command needs, and
``import profiling_utils`` stays cheap. ``from profiling_utils import load_trace`` works as
usual.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import measures
    from .capture import Capture, capture, run_name, time_calls, time_per_call
    from .compare import Comparison, compare
    from .errors import TraceError
    from .peaks import Peaks, achieved_gb_s, achieved_tflops, gemm_flops, measure_peaks
    from .provenance import environment
    from .roofline import Roofline, RooflineEntry, roofline
    from .rules import Finding, diagnose
    from .trace import DeviceInfo, Lane, Span, Step, Trace, load_trace

_HOMES = {
    "Capture": "capture",
    "capture": "capture",
    "run_name": "capture",
    "time_per_call": "capture",
    "time_calls": "capture",
    "Comparison": "compare",
    "compare": "compare",
    "TraceError": "errors",
    "Peaks": "peaks",
    "achieved_gb_s": "peaks",
    "achieved_tflops": "peaks",
    "gemm_flops": "peaks",
    "measure_peaks": "peaks",
    "environment": "provenance",
    "Roofline": "roofline",
    "RooflineEntry": "roofline",
    "roofline": "roofline",
    "Finding": "rules",
    "diagnose": "rules",
    "DeviceInfo": "trace",
    "Lane": "trace",
    "Span": "trace",
    "Step": "trace",
    "Trace": "trace",
    "load_trace": "trace",
}

__all__ = [
    "Capture",
    "Comparison",
    "DeviceInfo",
    "Finding",
    "Lane",
    "Peaks",
    "Roofline",
    "RooflineEntry",
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
    "roofline",
    "run_name",
    "time_per_call",
    "time_calls",
]


def __getattr__(name: str) -> Any:
    if name == "measures":
        return importlib.import_module(".measures", __name__)
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


class _Package(types.ModuleType):
    """The package module. Importing a submodule sets it as an attribute of its package, and
    two submodules share their name with the function they define (``compare``,
    ``capture``): keep the function, which is what ``profiling_utils.compare`` has always
    been."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and _HOMES.get(name) == name:
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
