"""benchmarks/workloads.py on a tiny subset (--quick): every column present, every number positive."""
import json
import subprocess
import sys

from helpers import time_limit

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def test_workloads_quick_subset(tmp_path):
    out = tmp_path / "workloads"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "workloads.py"), "--quick", "--configs", "default",
                    "--only", "featurewise/gd,fourier_powerlaw/nqf,deep/mlp_gd", "--out", str(out)],
                   check=True, cwd=ROOT, timeout=time_limit(240), capture_output=True)
    res = json.loads(out.with_suffix(".json").read_text())
    assert res["machine"] and res["torch"] and res["date"]
    (p,) = res["passes"]
    assert p["threads"] == 1 and p["peak_gflops"]["float32"] > 0 and p["peak_gflops"]["float64"] > 0
    rows = {r["workload"]: r for r in p["rows"]}
    assert set(rows) == {"default featurewise/gd NQF", "default fourier_powerlaw/nqf", "default deep/mlp_gd trio"}
    for name, row in rows.items():
        assert set(res["columns"]) <= set(row), name
        for col in ("matmul_mflop", "ms_per_step", "gflops", "pct_peak"):
            assert row[col] > 0, (name, col, row[col])
        assert row["record_steps"] >= 0 and row["dtype"] in ("float32", "float64")
    text = out.with_suffix(".txt").read_text()
    for word in ("matmul peak float32", "torch", "load average", "ms/step", "% peak", *rows):
        assert word in text
