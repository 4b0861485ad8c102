"""examples/moe_safetensors.py at a small size: the safetensors header read by hand matches the
safetensors package, and the ringfetch loop (rf.File slices as keyed sources, hints, acquire/release)
computes exactly what the numpy.memmap loop does, cold or warm, in one process or each loop in a child
process in a memory cgroup."""
import importlib.util
import os
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


def test_loops_agree_in_memory_groups(moe, model_path):
    # Each loop in a child process, in a fresh memory cgroup where this process may make one (root),
    # else unlimited: either way the loops agree, the results say which, and no group is left behind.
    r = moe.run_isolated(str(model_path), memory_mib=96, steps=2, k=2, hints=2)
    assert r["agree"]
    assert r["keyed_stats"]["acquires"] == 2 * 3 * 2
    mem = r["memory"]
    assert mem["budget_mib"] == 96
    if mem["enforced"] is None:
        assert mem["why_not"]
        return
    assert set(mem["peak_mib"]) == {"ringfetch", "memmap"}
    assert all(p is None or 0 < p <= 96 for p in mem["peak_mib"].values())
    _, parent = moe.MemoryGroup.parent()
    assert not [g for g in os.listdir(parent) if g.startswith("ringfetch-moe-%d-" % os.getpid())]
