"""examples/moe_safetensors.py at a small size: the safetensors header read by hand matches the
safetensors package, and the ringfetch loop (rf.File slices as keyed sources, hints, acquire/release)
computes exactly what the numpy.memmap loop does, cold or warm."""
import importlib.util
import pathlib

import numpy as np
import pytest

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "moe_safetensors.py"


@pytest.fixture(scope="module")
def moe():
    pytest.importorskip("safetensors")
    spec = importlib.util.spec_from_file_location("moe_safetensors", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def model_path(moe, tmp_path_factory):
    path = tmp_path_factory.mktemp("moe") / "model.safetensors"
    moe.write_model(str(path), layers=3, experts=6, dim=64)
    return path


def test_header_matches_safetensors(moe, model_path):
    from safetensors.numpy import load_file

    ref = load_file(str(model_path))
    hdr = moe.read_header(str(model_path))
    raw = model_path.read_bytes()
    assert set(hdr) == set(ref)
    for name, (b, e, dtype, shape) in hdr.items():
        assert dtype == "F32"
        np.testing.assert_array_equal(np.frombuffer(raw[b:e], np.float32).reshape(shape), ref[name])


@pytest.mark.parametrize("cold", [True, False])
def test_loops_agree(moe, model_path, backend, cold):
    # cold: a cache of 5 slots emptied every step; warm: room for every expert (18 of 16 KiB)
    r = moe.run(str(model_path), steps=4, k=2, hints=2, budget_mib=0 if cold else 1, cold=cold,
                backend=backend)
    assert r["agree"]
    ks = r["keyed_stats"]
    assert ks["acquires"] == 4 * 3 * 2
    assert ks["prefetches"] > 0
    if not cold:
        assert r["slots"] == 18
        assert ks["hits"] > 0   # experts that come back step after step stay in their slots
