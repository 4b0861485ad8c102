"""Fixtures of the Python suite (pytest tests/python, run by `make test` in a fresh venv built by
`pip install .`): every test that takes `backend` runs once per CPU backend."""
import pytest

import ringfetch as rf


@pytest.fixture(params=["cpu", "threads"])
def backend(request):
    return request.param


@pytest.fixture
def pipeline(backend):
    """A small pipeline of 4 slots of 4 KiB, closed after the test."""
    p = rf.Pipeline(4096, depth=4, backend=backend)
    yield p
    p.close()
