"""Fixtures of the ONNX reader's tests: the kiln CLI and libkiln.so of the build under test (KILN_CLI,
KILN_LIB, set by scripts/test-onnx.sh), and onnx_cache, a folder in the build tree for models that take long
to make (the backend node test cases)."""
import os
import pathlib

import pytest


@pytest.fixture(scope="session")
def kiln_cli():
    return os.environ["KILN_CLI"]


@pytest.fixture(scope="session")
def onnx_cache():
    path = pathlib.Path(os.environ.get("KILN_ONNX_CACHE", "onnx-cache"))
    path.mkdir(parents=True, exist_ok=True)
    return path
