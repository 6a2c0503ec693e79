"""Teacher-student (Fig. 6): parting step of module and NQF against the teacher's weight scale.

At the paper's settings (App. C: unit-variance teacher, eps = 1e-3, lr 0.05 / 0.02, batch 64) the
module parts from its NQF long before step 100. This scan shows why: the parting step follows
the ignition step of the NQF's top mode, ln(r / (C z0)) / (r lr), which falls as the teacher's
scale (hence r) grows. Writes benchmarks/teacher_scale_scan.csv.

    .venv/bin/python benchmarks/teacher_scale_scan.py [steps]
"""
import csv
import sys
import time
from pathlib import Path

import numpy as np
import torch

from nqf.experiments import teacher_student as ts
from nqf.pipeline.config import validate_config

torch.set_num_threads(2)
STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 600
STDS = (1.0, 0.5, 0.3, 0.2, 0.1)
rows = []
for std in STDS:
    exp = validate_config({"experiments": {"x": {"kind": "teacher_student", "teacher_std": std,
                                                 "seeds": [0, 1, 2], "steps": {"mlp": STEPS, "qk_head": STEPS}}}})
    cfg = exp["experiments"]["x"]
    data = ts.make_data(cfg)
    theory = ts.theory(ts.structure(data, cfg), cfg)
    for arch in cfg["architectures"]:
        t0 = time.perf_counter()
        run = ts.train_run(data, cfg, arch, "cpu")
        part = run["parting_step"].values
        y_std = float(data[f"{arch}_probe_y"].std())
        rows.append({"architecture": arch, "teacher_std": std, "target_std": round(y_std, 4),
                     "ignition_step": round(float(theory["ignition_step"].sel(arch=arch)), 2),
                     "parting_steps": " ".join(str(int(p)) for p in part),
                     "parting_mean": round(float(np.mean(np.where(part < 0, STEPS, part))), 2),
                     "never_parted": int((part < 0).sum()), "steps": STEPS,
                     "seconds": round(time.perf_counter() - t0, 1)})
        print(rows[-1], flush=True)
out = Path(__file__).with_suffix(".csv")
with open(out, "w", newline="") as fh:
    w = csv.DictWriter(fh, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
print("wrote", out)
