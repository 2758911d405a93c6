"""Where a run happened: GPU, driver, CUDA, torch, date.

Every figure on the site comes from the run that built it, so every page states the machine
that produced it. :func:`environment` reads that from the live process; a saved trace carries
part of it too (see :attr:`profiling_utils.trace.Trace.devices`).
"""

from __future__ import annotations

import datetime as _dt
import platform
import shutil
import subprocess
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Environment:
    """The machine and software a run used."""

    gpu: str | None
    """GPU name as CUDA reports it, or ``None`` when the run had no GPU."""
    driver: str | None
    """NVIDIA driver version (from ``nvidia-smi``), when known."""
    cuda: str | None
    """CUDA version torch was built with (``torch.version.cuda``)."""
    torch: str
    """``torch.__version__``."""
    python: str
    """Python version."""
    date: str
    """UTC date of the run, ISO 8601."""

    @property
    def has_gpu(self) -> bool:
        return self.gpu is not None

    def as_dict(self) -> dict[str, str | None]:
        return asdict(self)

    def one_line(self) -> str:
        """A short human sentence, e.g. for the footer of a gallery page."""
        if self.gpu:
            where = f"{self.gpu} (driver {self.driver or 'unknown'}, CUDA {self.cuda or 'unknown'})"
        else:
            where = "CPU only (no GPU was available)"
        return f"{where}, torch {self.torch}, Python {self.python}, {self.date}"


def _driver_version() -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0] if out.strip() else None


def environment() -> Environment:
    """Describe the current process's machine: GPU, driver, CUDA, torch, Python and date."""
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return Environment(
        gpu=gpu,
        driver=_driver_version() if gpu else None,
        cuda=torch.version.cuda,
        torch=torch.__version__,
        python=platform.python_version(),
        date=_dt.datetime.now(_dt.timezone.utc).date().isoformat(),
    )
