"""profiling_utils.fresh: a program run in a new interpreter, and what it reports back."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import profiling_utils
from profiling_utils.fresh import FreshProcessError, run_in_fresh_process, without_paths

REPORTS_ITSELF = """
import os, sys
import profiling_utils
from profiling_utils.fresh import report
print("a line of its own")
report(package=profiling_utils.__file__, python=sys.executable, args=sys.argv[1:])
report(mode=os.environ.get("PU_TEST_MODE"), pid=os.getpid())
"""


def test_the_child_is_this_python_with_this_profiling_utils_wherever_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # profiling_utils is not importable from here by itself
    monkeypatch.delenv("PYTHONPATH", raising=False)
    run = run_in_fresh_process(REPORTS_ITSELF, 3, "x", env={"PU_TEST_MODE": "cold"})
    assert run.values["package"] == profiling_utils.__file__
    assert run.values["python"] == sys.executable
    assert run.values["args"] == ["3", "x"]
    assert run.values["mode"] == "cold"
    assert run.values["pid"] != __import__("os").getpid()
    assert run.stdout == "a line of its own"
    assert run.elapsed_s > 0


def test_a_failing_program_raises_with_its_output_and_no_machine_paths() -> None:
    program = "import profiling_utils.fresh as f\nraise ValueError(f.__file__)"
    with pytest.raises(FreshProcessError) as failed:
        run_in_fresh_process(program)
    message = str(failed.value)
    assert "status 1" in message and "ValueError: …/fresh.py" in message
    assert str(Path(profiling_utils.__file__).parent) not in message


def test_a_program_that_runs_too_long_is_stopped() -> None:
    with pytest.raises(FreshProcessError, match="longer than 0.5 s"):
        run_in_fresh_process(
            "import time\nprint('started', flush=True)\ntime.sleep(30)", timeout_s=0.5
        )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('File "/work/a/profiling_utils/capture.py", line 151', 'File "…/capture.py", line 151'),
        ("/tmp/x/run.json.gz: cut short", "…/run.json.gz: cut short"),
        (
            "see https://ui.perfetto.dev/v1/app and a/b/c",
            "see https://ui.perfetto.dev/v1/app and a/b/c",
        ),
    ],
)
def test_without_paths_keeps_file_names_and_urls(text: str, expected: str) -> None:
    assert without_paths(text) == expected
