"""Rule fit: measurements from the runs beside the theory, and the checked claims."""
from pathlib import Path

from nqf.experiments import kind_of, merge_seed_blocks, reading_of
from nqf.experiments.common import with_reading
from nqf.experiments.divergence import diverged_runs, divergence_fit
from nqf.io.netcdf import write_dataset
from nqf.pipeline.jobs import job
from nqf.pipeline.validate import (
    RUN_DIMS_OF_STRUCTURE,
    check_derived,
    open_stage,
    with_data_config,
)

cfg = snakemake.params.cfg  # noqa: F821
exp_cfg = snakemake.config["experiments"][snakemake.wildcards.exp]  # noqa: F821
exp = snakemake.wildcards.exp  # noqa: F821
with job(snakemake.log[0], "fit") as log:  # noqa: F821
    structure = open_stage(snakemake.input.structure, "structure", exp_cfg, experiment=exp)  # noqa: F821
    theory = open_stage(snakemake.input.theory, "theory", exp_cfg, experiment=exp)  # noqa: F821
    check_derived(structure, theory, snakemake.input.theory, "theory")  # noqa: F821
    files = {p: open_stage(p, "train", exp_cfg, experiment=exp) for p in snakemake.input.runs}  # noqa: F821
    for p, run in files.items():  # one z per structure mode, where the kind says so
        check_derived(structure, run, p, "train", dims=RUN_DIMS_OF_STRUCTURE.get(cfg["kind"], ()))
    runs = merge_seed_blocks({Path(p).stem: run for p, run in files.items()})
    if diverged_runs(runs):
        log.warning("runs %s diverged: fit skipped, one failing summary row each", sorted(diverged_runs(runs)))
        ds = divergence_fit(runs)
    else:
        ds = kind_of(cfg).fit(structure, theory, runs, cfg)
    ds = with_reading(ds, reading_of(cfg))
    ds.attrs["experiment"] = exp
    ds = with_data_config(ds, exp_cfg)
    write_dataset(ds, snakemake.output[0], config=cfg,  # noqa: F821
                  title=f"nqf fits of experiment {snakemake.wildcards.exp}")  # noqa: F821
