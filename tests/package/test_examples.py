"""examples/own_layer.py, the worked path for a user's own layer, runs end to end (small size).

Budgets of its comparisons (lr = 0.05, modes from z(0) ~ 1e-3 to saturation):
* NQF under GD (exact recursion) vs the M-flow: GD's O(lr) lag, (lr/4) ln(z_half/z0) r / (r t*)
  ~ 2% here; asserted <= 3%.
* the trained sin network vs its NQF under the same GD: the module's O(|W|^2) relative error
  (Z2: the cubic term of sin), largest near saturation; measured 1-4%, asserted <= 6%.
* Theorem 8 (per-seed effective amplitudes) vs the M-flow: Theorem 8 takes one ignition at a
  time, so it is asserted only for modes whose M-flow ignition is at least 10% apart in time from
  every other mode's (modes 0-2 here: measured <= 0.8%, asserted <= 3%). The two slowest modes
  ignite 2.4% apart and share the d = K + 2 units; there Theorem 8 misses by 7.6% and 10.4%
  (measured, printed by the example, not asserted).
"""
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from helpers import time_limit

ROOT = Path(__file__).resolve().parents[2]


def test_own_layer_example_runs_and_predicts_the_trained_ignition_times(tmp_path):
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "own_layer.py"), str(tmp_path), "--small"],
                          capture_output=True, text=True, timeout=time_limit(120))
    elapsed = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr[-2000:]
    # its run time (~9 s alone on 2 cores, 40 s beside other jobs) is reported, not asserted: the
    # subprocess timeout above bounds it
    print(f"examples/own_layer.py --small: {elapsed:.1f} s")
    out = proc.stdout
    assert "t* trained module" in out and "run time" in out and "ZGZ True, Z2 True" in out
    assert (tmp_path / "own_layer.png").stat().st_size > 10_000
    res = json.loads((tmp_path / "own_layer.json").read_text())
    assert res["method"] == "mflow"
    flow, gd, trained, th8 = (np.array(res[k]) for k in ("t_predicted", "t_nqf_gd", "t_trained", "t_theorem8"))
    assert flow.size == 5 and np.all(np.isfinite(trained))
    assert np.max(np.abs(gd / flow - 1)) <= 0.03
    assert np.max(np.abs(trained / gd - 1)) <= 0.06
    gaps = np.abs(np.log(flow[:, None] / flow[None, :])) + np.diag(np.full(flow.size, np.inf))
    alone = np.min(gaps, axis=1) > np.log(1.1)
    assert alone.sum() >= 2, flow
    assert np.max(np.abs(th8[alone] / flow[alone] - 1)) <= 0.03
