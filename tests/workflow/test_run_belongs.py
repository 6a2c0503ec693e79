"""Through the snakemake CLI: a run file that holds another eps than its id names (as two eps
values sharing one id used to produce) is refused when the fit reads it, with both values, moved
aside and retrained in the same call, after which the fit goes through (issue 16)."""
import pytest
import xarray as xr
import yaml
from helpers import ROOT, read_test_config, snakemake

pytestmark = pytest.mark.workflow


def test_a_run_of_another_eps_is_refused_and_retrained(tmp_path):
    cfg = read_test_config()
    cfg["experiments"] = {"competition": cfg["experiments"]["competition"]}
    eps = cfg["experiments"]["competition"]["eps"]
    assert eps[:2] == [1.0e-3, 1.0e-6]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    work = tmp_path / "run"
    target = "results/fits/competition.nc"
    snakemake(work, target, "--configfile", str(path))
    runs = work / "results" / "runs" / "competition"
    wrong = runs / "eps1e-06.nc"
    wrong.write_bytes((runs / "eps1e-03.nc").read_bytes())  # newer than the fit: the fit reruns on it
    second = snakemake(work, target, "--configfile", str(path), check=False)
    text = second.stdout + second.stderr
    # The file is new to nqf's record of the results (written behind the workflow), so the check on
    # read (nqf.pipeline.verify_stage: the config stored in the file against the run's config) runs
    # before planning, names it, moves it aside, and this call retrains it; the fit's own check
    # (nqf.experiments.verify_runs, unit-tested in tests/experiments/test_verify_runs.py) is the
    # second line behind it.
    assert second.returncode == 0, text[-3000:]
    assert ("results/runs/competition/eps1e-06.nc is readable but wrong: it was made for another "
            "configuration: key 'eps' is 0.001 in the file and 1e-06 in the config (it is made by the "
            "rule 'train'") in text
    assert "It was moved aside to results/runs/competition/eps1e-06.nc.unusable" in text
    assert "Traceback" not in text
    assert (runs / "eps1e-06.nc.unusable").exists()
    with xr.open_dataset(wrong, engine="netcdf4") as ds:
        assert float(ds.attrs["eps"]) == 1e-6


def test_cuda_on_a_machine_without_it_is_refused_at_parse_time(tmp_path):
    """device: cuda where torch sees no CUDA stops snakemake before any job (it used to fail in
    the first training job, after the data jobs had run)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    proc = snakemake(tmp_path, "--configfile", str(ROOT / "config" / "test.yaml"), "--config", "device=cuda", check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert ("Invalid configuration: Config key 'device' is 'cuda' but torch sees no CUDA device on this machine; "
            "use auto (CUDA where present, else the CPU) or cpu.") in text
    assert "Traceback" not in text and not (tmp_path / "results").exists()
