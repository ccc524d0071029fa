"""Shared fixtures of the binding's tests. The environment says where things are (scripts/test-python.sh
sets it from the CMake build):
    KILN_CLI     the kiln CLI of the build, for the tests that compare against it
    KILN_MODEL   the bundled stories260K.gguf (default: models/ of this repository)
    KILN_MINILM  all-MiniLM-L6-v2 as F32 GGUF (scripts/get-minilm.sh); the embedding tests skip without it
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import List

import pytest

import kiln

REPO = Path(__file__).resolve().parents[2]


def _env_path(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


@pytest.fixture(scope="session")
def model_path() -> str:
    return _env_path("KILN_MODEL", str(REPO / "models" / "stories260K.gguf"))


@pytest.fixture(scope="session")
def cli() -> str:
    path = _env_path("KILN_CLI", str(REPO / "build" / "kiln"))
    if not os.access(path, os.X_OK):
        pytest.skip(f"no kiln CLI at {path} (set KILN_CLI to the build's kiln)")
    return path


@pytest.fixture(scope="session")
def minilm_path() -> str:
    path = _env_path("KILN_MINILM", str(REPO / "build" / "minilm" / "minilm-f32.gguf"))
    if not os.path.exists(path):
        pytest.skip(f"no MiniLM GGUF at {path}: scripts/get-minilm.sh makes it (make test does)")
    return path


@pytest.fixture(scope="module")
def llm(model_path: str):
    with kiln.Llama(model_path, verbose=False, seed=1234) as llama:
        yield llama


def run_cli(cli: str, args: List[str]) -> bytes:
    """The CLI's stdout for args (its stderr is shown when it fails)."""
    done = subprocess.run([cli] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    return done.stdout
