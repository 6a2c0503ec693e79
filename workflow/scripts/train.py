"""Rule train: one training run; progress goes to the rule's log.

The device comes from the global config, not from params: moving a sweep between CPU and GPU
does not by itself rerun finished training jobs. Torch gets the job's threads (1 unless the rule
says otherwise): with one job per core, extra BLAS threads oversubscribe the cores (5-8x slower).
A diverged run stops the job (on_divergence: stop) or is written marked diverged (record).
A seed block's file names its run (attribute seed_block_of), so that fit and figure join them.
"""
from pathlib import Path

import torch

from nqf.errors import TrainingDiverged
from nqf.experiments import kind_of, split_run_id
from nqf.experiments.divergence import (
    diverged_run,
    stable_lr_clause,
    structure_for_hint,
)
from nqf.io.netcdf import open_result, write_dataset
from nqf.io.runs import with_run_coordinates
from nqf.pipeline.jobs import job
from nqf.pipeline.validate import open_stage, with_data_config

cfg = snakemake.params.cfg  # noqa: F821
run = snakemake.wildcards.run  # noqa: F821
base, block = split_run_id(snakemake.config["experiments"][snakemake.wildcards.exp], run)  # noqa: F821
title = f"nqf training run {run} of experiment {snakemake.wildcards.exp}"  # noqa: F821
torch.set_num_threads(max(1, snakemake.threads))  # noqa: F821
with job(snakemake.log[0], "train") as log:  # noqa: F821
    data = open_stage(snakemake.input[0], "data", snakemake.config["experiments"][snakemake.wildcards.exp],  # noqa: F821
                      experiment=snakemake.wildcards.exp)  # noqa: F821
    try:
        ds = kind_of(cfg).train_run(data, cfg, base, device=snakemake.config["device"])  # noqa: F821
    except TrainingDiverged as exc:
        # the structure file if that stage has run (results/runs/{exp}/{run}.nc ->
        # results/structure/{exp}.nc), else the stage computed here: only to word the message
        structure_file = Path(snakemake.output[0]).parents[2] / "structure" / f"{snakemake.wildcards.exp}.nc"  # noqa: F821
        structure = (open_result(structure_file, made_by="structure") if structure_file.exists()
                     else structure_for_hint(data, snakemake.config["experiments"][snakemake.wildcards.exp]))  # noqa: F821
        exc.args = (str(exc) + stable_lr_clause(structure, cfg),)
        if snakemake.config.get("on_divergence", "stop") != "record":  # noqa: F821
            raise
        log.warning("%s Recorded as diverged (on_divergence: record).", exc)
        ds = diverged_run(exc, run, str(exc))
    if block is not None:
        ds.attrs.update(run=run, seed_block_of=base)
    ds.attrs.setdefault("run", run)
    # run parameters as scalar coordinates: the files of an experiment concatenate along 'run'
    ds = with_run_coordinates(ds, snakemake.wildcards.exp)  # noqa: F821
    ds = with_data_config(ds, snakemake.config["experiments"][snakemake.wildcards.exp])  # noqa: F821
    write_dataset(ds, snakemake.output[0], config=cfg, title=title)  # noqa: F821
