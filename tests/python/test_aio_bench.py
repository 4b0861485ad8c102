"""bench/aio_bench.py at a tiny size (DeepSpeed left out): every pass of every contestant computes the
same sums, the output names each contestant and ratio, the JSON holds the medians, and the file it made
is removed."""
import json
import pathlib
import subprocess
import sys

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench" / "aio_bench.py"


def test_aio_bench_smoke(tmp_path):
    data, out = tmp_path / "stream.bin", tmp_path / "medians.json"
    r = subprocess.run([sys.executable, str(BENCH), "--file", str(data), "--mib", "4", "--size", "64K,1M",
                        "--reps", "2", "--json", str(out), "--no-deepspeed"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "deepspeed: left out: --no-deepspeed" in r.stdout
    for words in ("block 64 KiB (64 blocks)", "block 1024 KiB (4 blocks)", "ringfetch / pread", "rf-auto / pread"):
        assert words in r.stdout, r.stdout
    medians = json.loads(out.read_text())
    assert sorted(medians) == ["1048576", "65536"]
    for m in medians.values():
        assert sorted(m["gbs"]) == ["mmap", "pread", "rf-auto", "ringfetch"]
        assert all(v > 0 for v in m["gbs"].values())
    assert not data.exists()
