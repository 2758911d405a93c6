"""Measure a first call in a fresh Python process, whatever ran before it.

One-time costs (loading CUDA modules, creating a cuBLAS handle, starting the profiler) are
paid once per process. A page that measures them in its own process measures whatever the
pages built before it left undone, so its result would change with the order of the build.
:func:`run_in_fresh_process` runs a program in a new interpreter instead: the same Python,
importing the same ``profiling_utils``, with the environment of the caller (so
:func:`profiling_utils.render.trace_dir` is the same folder). The program hands its results
back with :func:`report`::

    PROGRAM = '''
    import torch
    from profiling_utils import capture
    from profiling_utils.fresh import report
    from profiling_utils.render import trace_dir

    x = torch.randn(64, 64, device="cuda")
    run = capture(lambda: x @ x, name="cold", out_dir=trace_dir())
    report(trace_path=str(run.trace_path))
    '''
    cold = run_in_fresh_process(PROGRAM)
    trace = load_trace(cold.values["trace_path"])
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["FreshProcessError", "FreshRun", "report", "run_in_fresh_process", "without_paths"]

REPORT_MARKER = "@@profiling_utils.fresh@@ "
"""Prefix of the line :func:`report` prints; the rest of the line is a JSON object."""

_PACKAGE_ROOT = Path(__file__).resolve().parents[1]
_ABSOLUTE_PATH = re.compile(r"(?<![\w.~:/])(?:/[^\s/\"':,()]+)+/(?=[^\s/\"':,()]+)")


@dataclass(frozen=True)
class FreshRun:
    """What a program run by :func:`run_in_fresh_process` handed back."""

    values: dict[str, Any]
    """Everything it passed to :func:`report` (later calls update earlier ones)."""
    stdout: str
    """What else it printed, report lines left out."""
    elapsed_s: float = field(default=0.0)
    """Wall-clock time of the whole process, interpreter start-up included."""


class FreshProcessError(RuntimeError):
    """The fresh process ended with a non-zero status; the message holds its output."""


def report(**values: Any) -> None:
    """Hand ``values`` (JSON-serialisable) back to the process that started this one."""
    print(REPORT_MARKER + json.dumps(values), flush=True)


def without_paths(text: str) -> str:
    """``text`` with the folders of every absolute path replaced by ``…/``.

    File names stay (``…/capture.py``), so a traceback still says where it happened without
    printing the machine's folders.
    """
    return _ABSOLUTE_PATH.sub("…/", text)


def run_in_fresh_process(
    program: str,
    *args: str | int | float,
    timeout_s: float = 600,
    env: Mapping[str, str] | None = None,
) -> FreshRun:
    """Run ``program`` in a new Python interpreter and return what it :func:`report` ed.

    The child is the same interpreter (``sys.executable``) and imports this same
    ``profiling_utils`` (its folder comes first on ``PYTHONPATH``), inside a docs build too.

    Args:
        program: Python source, run as ``python -c program``.
        *args: Its command-line arguments (``sys.argv[1:]`` in the program).
        timeout_s: Longest the program may run.
        env: Variables to set on top of this process's environment.

    Raises:
        FreshProcessError: When the program fails or runs out of time; the message holds
            its output, with machine paths removed.
    """
    child_env = {**os.environ, **(env or {})}
    python_path = [str(_PACKAGE_ROOT)] + [
        p for p in child_env.get("PYTHONPATH", "").split(os.pathsep) if p
    ]
    child_env["PYTHONPATH"] = os.pathsep.join(python_path)
    command = [sys.executable, "-c", program, *map(str, args)]
    started = time.perf_counter()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, env=child_env, timeout=timeout_s
        )
    except subprocess.TimeoutExpired as err:
        raise FreshProcessError(
            f"the fresh process ran longer than {timeout_s:g} s:\n"
            + without_paths(_text(err.stdout) + _text(err.stderr))
        ) from None
    elapsed_s = time.perf_counter() - started
    if done.returncode != 0:
        raise FreshProcessError(
            f"the fresh process failed with status {done.returncode}:\n"
            + without_paths(done.stdout + done.stderr)
        )
    values: dict[str, Any] = {}
    other_lines = []
    for line in done.stdout.splitlines():
        if line.startswith(REPORT_MARKER):
            values.update(json.loads(line[len(REPORT_MARKER) :]))
        else:
            other_lines.append(line)
    return FreshRun(values=values, stdout="\n".join(other_lines), elapsed_s=elapsed_s)


def _text(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""
