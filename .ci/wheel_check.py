"""Run by .ci/wheel_check.sh in a fresh venv holding only the nqf wheel and its dependencies,
from a folder outside the checkout: the installed library must work on its own."""
import sys
import tempfile
import time
from pathlib import Path

import nqf
from nqf.pipeline.config import SCHEMA_PATH, load_yaml, validate_config
from nqf.experiments import check_config
from nqf.pipeline.local import run_experiment
from nqf.io.runs import open_runs

checkout = Path(sys.argv[1]).resolve()
here = Path(nqf.__file__).resolve()
assert checkout not in here.parents, f"nqf imported from the checkout ({here}), not from the wheel"
assert SCHEMA_PATH.is_file() and checkout not in SCHEMA_PATH.resolve().parents, SCHEMA_PATH
print(f"nqf {nqf.__version__} from {here.parent}; schema {SCHEMA_PATH}")

# the library's own dependencies only: `pip install .` brings no workflow (pyproject's `workflow` extra)
import importlib.util  # noqa: E402

workflow_only = [m for m in ("snakemake", "sklearn", "mlxtend", "dask") if importlib.util.find_spec(m)]
assert not workflow_only, f"a plain install brought {workflow_only}, which belong to the workflow extra"
missing = [name for name in nqf.__all__ if getattr(nqf, name, None) is None]
assert not missing, f"public names that do not load: {missing}"
print(f"every public name loads ({len(nqf.__all__)}), without snakemake, scikit-learn, mlxtend or dask")

default = validate_config(load_yaml(checkout / "config" / "config.yaml"))
check_config(default)
print(f"default config valid: {len(default['experiments'])} experiments")

start = time.perf_counter()
exp = load_yaml(checkout / "config" / "test.yaml")["experiments"]["featurewise"]
with tempfile.TemporaryDirectory() as results:
    out = run_experiment(exp, experiment="featurewise", results=results)
    passed = out["fit"]["claim_passed"].values.astype(bool)
    runs = open_runs("featurewise", results)
    assert passed.all(), list(out["fit"]["claim_quantity"].values[~passed])
    assert runs.sizes["run"] == 1 and float(runs["loss"].isel(step=-1).max()) < float(runs["loss"].isel(step=0).min())
print(f"featurewise experiment from the wheel: {passed.size} claims pass ({time.perf_counter() - start:.1f} s)")
