"""The publishing workflow's own commands, run here as the GPU runner runs them.

No GitHub runner is needed: each step's ``run:`` script is read from
``.github/workflows/docs.yml`` and executed with bash, with ``python3`` being this test's
Python (which has torch). ``nox -s lint`` runs actionlint on the same file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

WORKFLOW = Path(__file__).parents[1] / ".github" / "workflows" / "docs.yml"


def build_steps() -> list[dict[str, Any]]:
    return yaml.safe_load(WORKFLOW.read_text())["jobs"]["build"]["steps"]


def step(name: str) -> dict[str, Any]:
    """The build job's step called ``name``."""
    (found,) = [s for s in build_steps() if s.get("name") == name]
    return found


def run_step(name: str, cwd: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], str]:
    """Run a step's script with bash in ``cwd``: (the process, what it wrote to GITHUB_OUTPUT)."""
    python_dir = tmp_path / "python"
    python_dir.mkdir(exist_ok=True)
    python3 = python_dir / "python3"
    # A script, not a symlink: a link to a virtualenv's Python, outside it, loses the
    # virtualenv (and the torch it sees).
    python3.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python3.chmod(0o755)
    output = tmp_path / "github_output"
    output.write_text("")
    process = subprocess.run(
        ["bash", "-e", "-c", step(name)["run"]],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **os.environ,
            "PATH": f"{python_dir}{os.pathsep}{os.environ['PATH']}",
            "GITHUB_OUTPUT": str(output),
        },
    )
    return process, output.read_text()


def outputs(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


def test_the_gpu_check_runs_before_anything_is_built_or_restored() -> None:
    names = [s.get("name") or s.get("uses") for s in build_steps()]
    check = names.index("Refuse to publish a CPU build")
    assert check < names.index("Restore the executed gallery")
    assert check < names.index("Build the site (nox -s docs)")


def test_a_build_without_a_gpu_is_refused(tmp_path: Path) -> None:
    import torch

    process, _ = run_step("Refuse to publish a CPU build", tmp_path, tmp_path)
    if torch.cuda.is_available():
        assert process.returncode == 0, process.stderr
        assert torch.cuda.get_device_name(0) in process.stdout
    else:
        assert process.returncode == 1
        assert process.stderr.strip() == (
            "torch sees no GPU: refusing to build and publish a CPU-only site"
        )


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with the three folders whose changes matter, or not, to the gallery."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    for path in (
        "examples/part1_matmul_add/plot_00.py",
        "profiling_utils/trace.py",
        "docs/index.md",
    ):
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text("first\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "first")
    return repo


def gallery_key(repo: Path, tmp_path: Path) -> dict[str, str]:
    process, written = run_step("Key the executed gallery", repo, tmp_path)
    assert process.returncode == 0, process.stderr
    return outputs(written)


def change(repo: Path, path: str) -> None:
    (repo / path).write_text((repo / path).read_text() + "changed\n")
    git(repo, "commit", "-q", "-am", f"change {path}")


def test_the_gallery_key_names_torch_cuda_and_the_gpu(repo: Path, tmp_path: Path) -> None:
    import torch

    key = gallery_key(repo, tmp_path)
    assert key["key"].startswith(key["prefix"])
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    machine = f"{torch.__version__}-{torch.version.cuda}-{gpu}".replace(" ", "-")
    assert key["prefix"] == f"gallery-{machine}-"
    cache = step("Restore the executed gallery")["with"]
    assert cache["key"] == "${{ steps.gallery.outputs.key }}"
    assert cache["restore-keys"] == "${{ steps.gallery.outputs.prefix }}"
    assert cache["path"] == "docs/auto_examples"


def test_the_gallery_key_follows_examples_and_library_not_prose(repo: Path, tmp_path: Path) -> None:
    first = gallery_key(repo, tmp_path)
    change(repo, "docs/index.md")
    assert gallery_key(repo, tmp_path) == first
    change(repo, "examples/part1_matmul_add/plot_00.py")
    after_example = gallery_key(repo, tmp_path)
    assert after_example["key"] != first["key"]
    assert after_example["prefix"] == first["prefix"]
    change(repo, "profiling_utils/trace.py")
    assert gallery_key(repo, tmp_path)["key"] not in (first["key"], after_example["key"])
