"""profiling_utils.capture: what it leaves on a page besides its trace and table."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from profiling_utils import capture


def test_torchs_no_warmup_warning_keeps_its_text_and_names_no_file(tmp_path: Path) -> None:
    x = torch.ones(8, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        capture(lambda: x @ x, name="no_warmup", out_dir=tmp_path, wait=0, warmup=0, active=2)
    (warmup,) = [w for w in caught if "won't be using warmup" in str(w.message)]
    assert warmup.category is UserWarning
    assert warmup.filename == "torch.profiler.schedule"
    text = warnings.formatwarning(warmup.message, warmup.category, warmup.filename, warmup.lineno)
    assert "/" not in text.split("UserWarning")[0]


def test_a_schedule_with_a_warmup_step_warns_nothing(tmp_path: Path) -> None:
    x = torch.ones(8, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        capture(lambda: x @ x, name="warmed", out_dir=tmp_path, wait=0, warmup=1, active=2)
    assert not [w for w in caught if "warmup" in str(w.message)]
