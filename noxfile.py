"""Sessions: ``tests`` (the suite, browser tests included), ``docs`` (build the site), ``lint``.

Every session reuses the torch that is already installed: on a GPU machine the preinstalled
CUDA build must run the gallery, never a CPU wheel or a second multi-gigabyte download.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True

ROOT = Path(__file__).parent


def _reuse_host_torch(session: nox.Session) -> None:
    """Make the torch of the interpreter running nox importable in the session's virtualenv.

    ``--system-site-packages`` is not enough: where the host Python is itself a virtualenv (as
    on our GPU machine), a new virtualenv sees the *base* interpreter's packages, not torch.
    A ``.pth`` file naming the directory that holds torch works in both cases, and pip then
    sees torch as installed and does not download another one.
    """
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        session.log("No torch installed next to nox: installing one into the session.")
        session.install("torch")
        return
    host_site = Path(spec.origin).parent.parent
    purelib = session.run(
        "python",
        "-c",
        "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        silent=True,
    ).strip()
    Path(purelib, "_host_torch.pth").write_text(f"{host_site}\n")
    session.log(f"Reusing torch from {host_site}")


@nox.session(venv_params=["--system-site-packages"])
def tests(session: nox.Session) -> None:
    """Run the test suite, including the site build and browser tests (CPU is enough)."""
    _reuse_host_torch(session)
    session.install("-e", ".[tests,docs]")
    # "python -m": a pytest on the host (seen through --system-site-packages) would run
    # outside the session's virtualenv, where the package is not installed.
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session(venv_params=["--system-site-packages"])
def docs(session: nox.Session) -> None:
    """Build the site into docs/_build/html, executing every gallery example, warnings as errors."""
    _reuse_host_torch(session)
    session.install("-e", ".[docs]")
    session.run(
        "python",
        "-m",
        "sphinx",  # sphinx-build, from the session's virtualenv whatever the host has
        "-W",
        "--keep-going",
        "-b",
        "html",
        "docs",
        "docs/_build/html",
        *session.posargs,
        env={"PYTHONHASHSEED": "0", **os.environ},
    )


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, as CI runs it."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", "profiling_utils", "tests", "noxfile.py")
