"""Seed blocks: a run split into jobs of a few seeds gives, once joined, the run trained as one
tensor program, so that appending seeds can train only the new blocks."""

import numpy as np
import pytest
import torch
import xarray as xr
from helpers import experiment_config

from nqf import experiments as E
from nqf.errors import ConfigError
from nqf.io.netcdf import open_result, write_dataset
from nqf.pipeline.config import validate_config


def _exp(kind: str, **over) -> dict:
    """The config/test.yaml experiment of this kind with three seeds in one job unless ``over``
    says otherwise (the tiny sizes keep it fast)."""
    return experiment_config(kind, base="test", **{"seeds": [3, 0, 1], "seeds_per_job": "all", **over})


def test_run_ids_and_configs():
    """Blocks are consecutive in the config's list; each block's run reads its own seeds only, and
    appending a seed leaves the existing blocks' ids and configs unchanged."""
    exp = _exp("teacher_student", seeds_per_job=2)
    assert E.run_ids(exp) == ["mlp.seeds-3-0", "mlp.seeds-1"]
    assert E.run_config(exp, "mlp.seeds-1")["seeds"] == [1]
    longer = dict(exp, seeds=[3, 0, 1, 7])
    assert E.run_ids(longer) == ["mlp.seeds-3-0", "mlp.seeds-1-7"]
    one = dict(exp, seeds_per_job=1)
    appended = dict(one, seeds=[3, 0, 1, 7])
    assert E.run_ids(appended)[:3] == E.run_ids(one)
    for run in E.run_ids(one):
        assert E.run_config(appended, run) == E.run_config(one, run)
    assert E.run_ids(_exp("teacher_student")) == ["mlp"]  # seeds_per_job: all
    with pytest.raises(ValueError, match="not one of this experiment's runs"):
        E.run_config(one, "mlp.seeds-5")


def test_kinds_without_blocks_refuse_the_key():
    with pytest.raises(ConfigError, match="Unknown config key 'experiments.x.seeds_per_job'"):
        validate_config({"experiments": {"x": {"kind": "featurewise", "seeds_per_job": 1}}})
    assert E.seed_block_kinds() == ["deep", "nqf_approximation", "real_data", "teacher_student"]


@pytest.mark.parametrize("kind", E.seed_block_kinds())
def test_blocks_join_to_the_batched_run(kind, tmp_path):
    """Every kind that allows blocks: train each run batched (3 seeds, one tensor program) and as
    blocks of 1 and 2 seeds; the joined blocks, read back from NetCDF, equal the batched run and
    give the same fit. Tolerance 1e-9 relative (float64 runs: batched matrix products sum in a
    different order, ~1e-16 per step, grown over a few hundred steps; float32 runs: 1e-4), and
    the same fraction of the variable's largest magnitude as absolute tolerance: a loss that
    decays from O(1) to 1e-17 carries rounding errors of the size of its start, not of its end."""
    torch.manual_seed(0)
    exp = _exp(kind)
    kind_mod = E.kind_of(exp)
    data = kind_mod.make_data(exp)
    batched = {run: kind_mod.train_run(data, E.run_config(exp, run), run, device="cpu") for run in E.run_ids(exp)}
    rtol = 1e-4 if exp.get("dtype") == "float32" else 1e-9
    for n in (1, 2):
        split = dict(exp, seeds_per_job=n)
        files = {}
        for run in E.run_ids(split):
            base, block = E.split_run_id(split, run)
            ds = kind_mod.train_run(data, E.run_config(split, run), base, device="cpu")
            ds.attrs.update(run=run, seed_block_of=base)
            path = tmp_path / f"{run}.nc"
            write_dataset(ds, path, config=E.run_config(split, run), title="test")
            files[run] = open_result(path, made_by="train")
        joined = E.merge_seed_blocks(files)
        assert sorted(joined) == sorted(batched)
        for run, ref in batched.items():
            got = joined[run].sortby("seed")
            ref = ref.sortby("seed")
            np.testing.assert_array_equal(got["seed"].values, [0, 1, 3])
            for name, var in ref.data_vars.items():
                values = np.asarray(var.values)
                scale = float(np.nanmax(np.abs(values))) if values.dtype.kind == "f" and values.size else 0.0
                np.testing.assert_allclose(got[name].values, values, rtol=rtol, atol=rtol * scale,
                                           err_msg=f"{kind} {run} {name} (blocks of {n})")
    # the fit stage sees the same numbers through the joined runs
    structure = E.structure_of(data, E.stage_config(exp, "structure"))
    theory = kind_mod.theory(structure, exp)
    f_batched = kind_mod.fit(structure, theory, batched, exp)
    f_joined = kind_mod.fit(structure, theory, joined, exp)
    if "seed" in f_batched.dims:
        f_batched, f_joined = f_batched.sortby("seed"), f_joined.sortby("seed")
    xr.testing.assert_allclose(f_batched, f_joined, rtol=max(rtol, 1e-6))


def test_overlapping_blocks_are_refused():
    a = xr.Dataset({"loss": ("seed", [1.0, 2.0])}, coords={"seed": [0, 1]}, attrs={"seed_block_of": "r"})
    b = xr.Dataset({"loss": ("seed", [3.0])}, coords={"seed": [1]}, attrs={"seed_block_of": "r"})
    with pytest.raises(ValueError, match="overlap"):
        E.merge_seed_blocks({"r.seeds-0-1": a, "r.seeds-1": b})
    whole = E.merge_seed_blocks({"r.seeds-0-1": a, "other": b.assign_attrs(seed_block_of=None)})
    assert set(whole) == {"r", "other"}
