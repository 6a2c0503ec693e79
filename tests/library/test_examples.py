"""examples/own_layer.py, the worked path for a user's own layer, runs end to end (small size).

Budgets of its comparisons (lr = 0.05, modes from z(0) ~ 1e-3 to saturation):
* NQF under GD (exact recursion) vs the M-flow: GD's O(lr) lag, (lr/4) ln(z_half/z0) r / (r t*)
  ~ 2% here; asserted <= 3%.
* the trained sin network vs its NQF under the same GD: the module's O(|W|^2) relative error
  (Z2: the cubic term of sin), largest near saturation; measured 1-4%, asserted <= 6%.
* Theorem 8 (per-seed effective amplitudes) vs the M-flow: Theorem 8 ignores the modes' coupling
  after ignition; measured <= 7%, asserted <= 10%.
"""
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def test_own_layer_example_runs_and_predicts_the_trained_ignition_times(tmp_path):
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "own_layer.py"), str(tmp_path), "--small"],
                          capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert elapsed < 30, elapsed
    out = proc.stdout
    assert "t* trained module" in out and "run time" in out and "ZGZ True, Z2 True" in out
    assert (tmp_path / "own_layer.png").stat().st_size > 10_000
    res = json.loads((tmp_path / "own_layer.json").read_text())
    assert res["method"] == "mflow"
    flow, gd, trained, th8 = (np.array(res[k]) for k in ("t_predicted", "t_nqf_gd", "t_trained", "t_theorem8"))
    assert flow.size == 5 and np.all(np.isfinite(trained))
    assert np.max(np.abs(gd / flow - 1)) <= 0.03
    assert np.max(np.abs(trained / gd - 1)) <= 0.06
    assert np.max(np.abs(th8 / flow - 1)) <= 0.10
