"""The fit reads only runs trained for the values it predicts for: a run file that records another
eps, architecture or kind is refused with the file and both values named, and marked unusable so
that the workflow job moves it aside and the next call retrains it. Nothing is trained here."""
import numpy as np
import pytest
import xarray as xr
from helpers import experiment_config

from nqf import experiments as E
from nqf.errors import ResultFileError
from nqf.experiments.verify_runs import check_runs
from nqf.io.netcdf import open_result, write_dataset
from nqf.pipeline.jobs import set_aside


def _run_file(path, **attrs) -> xr.Dataset:
    ds = xr.Dataset({"loss": (("seed", "step"), np.ones((1, 3)))}, coords={"seed": [0], "step": [0, 1, 2]},
                    attrs=attrs)
    write_dataset(ds, path, config={"eps": attrs.get("eps")}, title="test run")
    return open_result(path, made_by="train")


def test_the_competition_fit_refuses_a_run_of_another_eps(tmp_path):
    """The audit's case: eps [1e-3, 1.2e-3] shared one run trained at 1e-3; the run now named for
    1.2e-3 holds 1e-3, and the fit says so instead of comparing them."""
    comp = E.KINDS["competition"]
    exp = experiment_config("competition", eps=[1.0e-3, 1.2e-3])
    cfg = E.stage_config(exp, "fit")
    folder = tmp_path / "results" / "runs" / "x"
    runs = {comp.run_id(1.0e-3): _run_file(folder / "eps1e-03.nc", experiment_kind="competition", eps=1.0e-3),
            comp.run_id(1.2e-3): _run_file(folder / "eps1.2e-03.nc", experiment_kind="competition", eps=1.0e-3)}
    with pytest.raises(ResultFileError) as info:
        comp.fit(None, None, runs, cfg)
    message = str(info.value)
    assert message == (f"The run file {folder / 'eps1.2e-03.nc'} was trained with eps 0.001, but the fit compares it "
                       "with the prediction for eps 0.0012: it is not the run of this experiment's config (rule "
                       "'train', run 'eps1.2e-03').")
    assert info.value.unusable and info.value.path == folder / "eps1.2e-03.nc"
    assert "moved aside" in set_aside(info.value)
    assert not (folder / "eps1.2e-03.nc").exists() and (folder / "eps1.2e-03.nc.unusable").exists()


def test_values_equal_to_rounding_pass_and_unrecorded_values_are_not_checked():
    ds = xr.Dataset(coords={"eps": [1e-3, 1e-6]}, attrs={"lr": 0.01, "loss_convention": "mean"})
    check_runs({"r": ds}, {"r": {"eps": [1e-3 * (1 + 1e-14), 1e-6], "lr": 0.01, "loss": "mean", "width": 3}})
    for bad in ({"eps": [1e-3]}, {"eps": [1e-3, 1e-7]}, {"lr": 0.02}, {"loss": "sum"}):
        with pytest.raises(ResultFileError, match=f"Run 'r' was trained with {next(iter(bad))} "):
            check_runs({"r": ds}, {"r": bad})


def _fake_theory(exp: dict) -> xr.Dataset:
    """A theory file with just what the fits' run checks read (no fit gets further)."""
    archs = exp.get("architectures", ["mlp"])
    return xr.Dataset(coords={"architecture": archs, "theta": [0.5], "seed": [0]}, attrs={"eps": 1e-3, "lr": 0.1})


@pytest.mark.parametrize("kind", sorted(E.KINDS))
def test_every_kind_fit_refuses_a_run_of_another_kind(kind):
    """Every fit checks its runs first: a file recording experiment_kind 'other' is refused
    before any measurement."""
    exp = experiment_config(kind, base="schema")
    cfg = E.stage_config(exp, "fit")
    run = E.kind_of(exp).runs(exp)[0]
    ds = xr.Dataset(attrs={"experiment_kind": "other"})
    with pytest.raises(ResultFileError, match=rf"^Run '{run}' was trained with experiment_kind 'other', but the fit "
                                              rf"compares it with the prediction for experiment_kind '{kind}'"):
        E.kind_of(exp).fit(None, _fake_theory(exp), {run: ds}, cfg)


def test_joined_seed_blocks_are_named_by_their_blocks():
    ds = xr.Dataset(attrs={"experiment_kind": "deep", "seed_blocks": "mlp_gd.seeds-0-1, mlp_gd.seeds-2",
                           "optimizer": "adam"})
    with pytest.raises(ResultFileError, match=r"^Run 'mlp_gd' \(seed blocks mlp_gd.seeds-0-1, mlp_gd.seeds-2\) was "
                                              r"trained with optimizer 'adam'") as info:
        check_runs({"mlp_gd": ds}, {"mlp_gd": {"optimizer": "gd"}})
    assert not info.value.unusable
