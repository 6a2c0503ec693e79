"""One experiment end to end in this Python process, without Snakemake.

:func:`run_experiment` runs the stages data -> structure -> train -> theory -> fit of one
experiment config (a mapping as under ``experiments:`` in a config file) and returns their
Datasets, as the workflow's jobs would compute them (each stage on the part of the config its
rule is handed; every run of the experiment; seed blocks joined). Nothing is written unless
``results`` names a folder: then the files are laid out as the workflow lays them out
(``data/<id>.nc``, ``runs/<id>/<run>.nc``, ...), so that :func:`nqf.io.runs.open_runs` reads them.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import xarray as xr


def validated_experiment(exp_cfg: Mapping, experiment: str = "experiment", device: str = "cpu") -> dict:
    """``exp_cfg`` validated as the workflow validates it (schema, defaults filled in, the checks
    before any job: run ids, sizes, device): a ConfigError names the key that is wrong."""
    from nqf.experiments import check_config
    from nqf.pipeline.config import validate_config

    cfg = validate_config({"device": device, "experiments": {experiment: dict(exp_cfg)}})
    check_config(cfg)
    return cfg["experiments"][experiment]


def run_experiment(exp_cfg: Mapping, *, experiment: str = "experiment", device: str = "cpu",
                   results: str | os.PathLike | None = None) -> dict[str, object]:
    """Every stage of one experiment: ``{"data", "structure", "runs" (run id -> Dataset),
    "theory", "fit"}``. ``exp_cfg`` needs at least ``kind``; the schema fills in the rest
    (validated first, :func:`validated_experiment`). With ``results``, each Dataset is also
    written under that folder as the workflow names it, ``experiment`` being its id."""
    from nqf.experiments import (
        kind_of,
        merge_seed_blocks,
        reading_of,
        run_config,
        run_ids,
        split_run_id,
        stage_config,
        structure_of,
    )
    from nqf.experiments.claims import with_reading
    from nqf.experiments.divergence import diverged_runs, divergence_fit

    if not isinstance(exp_cfg, Mapping):
        raise TypeError(f"exp_cfg must be a mapping (one experiment's config, e.g. {{'kind': 'featurewise'}}); "
                        f"got a {type(exp_cfg).__name__}.")
    from nqf.pipeline.config import EXPERIMENT_ID

    if not isinstance(experiment, str) or not EXPERIMENT_ID.fullmatch(experiment):
        raise ValueError(f"experiment must be an experiment id (a letter, then letters, digits and '_', at most "
                         f"64 characters: it names the files); got {experiment!r:.60}.")
    if results is not None and not isinstance(results, (str, os.PathLike)):
        raise TypeError(f"results must be a folder (a str or path) or None; got a {type(results).__name__}.")
    cfg = validated_experiment(exp_cfg, experiment, device)
    kind = kind_of(cfg)
    data = kind.make_data(stage_config(cfg, "data"))
    structure = structure_of(data, stage_config(cfg, "structure"))
    runs = {}
    for run in run_ids(cfg):
        base, block = split_run_id(cfg, run)
        ds = kind.train_run(data, run_config(cfg, run), base, device=device)
        if block is not None:
            ds.attrs.update(run=run, seed_block_of=base)
        runs[run] = ds
    trained = dict(runs)
    runs = merge_seed_blocks(runs)
    theory = kind.theory(structure, stage_config(cfg, "theory"))
    fit_cfg = stage_config(cfg, "fit")
    fit = divergence_fit(runs) if diverged_runs(runs) else kind.fit(structure, theory, runs, fit_cfg)
    fit = with_reading(fit, reading_of(fit_cfg))
    out = {"data": data, "structure": structure, "runs": runs, "theory": theory, "fit": fit}
    if results is not None:
        _write(Path(results), experiment, cfg, out, trained)
    return out


def _write(root: Path, experiment: str, cfg: Mapping, stages: Mapping, trained: Mapping[str, xr.Dataset]) -> None:
    from nqf.experiments import run_config, stage_config
    from nqf.io import run_layout
    from nqf.io.netcdf import write_dataset
    from nqf.io.runs import with_run_coordinates

    for stage, folder in (("data", "data"), ("structure", "structure"), ("theory", "theory"), ("fit", "fits")):
        write_dataset(stages[stage], root / folder / f"{experiment}.nc", config=stage_config(cfg, stage),
                      title=f"nqf {stage} of experiment {experiment}")
    for run, ds in trained.items():
        ds = ds.copy()
        ds.attrs.setdefault("run", run)
        run_file = run_layout.to_file(with_run_coordinates(ds, experiment))
        write_dataset(run_file, root / "runs" / experiment / f"{run}.nc",
                      config=run_config(cfg, run), title=f"nqf training run {run} of experiment {experiment}")
