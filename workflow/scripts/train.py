"""Rule train: one training run; progress goes to the rule's log.

The device comes from the global config, not from params: moving a sweep between CPU and GPU
does not by itself rerun finished training jobs. Torch gets the job's threads (1 unless the rule
says otherwise): with one job per core, extra BLAS threads oversubscribe the cores (5-8x slower).
"""
import torch

from nqf.experiments import kind_of
from nqf.experiments.jobs import job
from nqf.netcdf import open_result, write_dataset

cfg = snakemake.params.cfg  # noqa: F821
run = snakemake.wildcards.run  # noqa: F821
torch.set_num_threads(max(1, snakemake.threads))  # noqa: F821
with job(snakemake.log[0], "train"):  # noqa: F821
    data = open_result(snakemake.input[0], made_by="data")  # noqa: F821
    ds = kind_of(cfg).train_run(data, cfg, run, device=snakemake.config["device"])  # noqa: F821
    write_dataset(ds, snakemake.output[0], config=cfg,  # noqa: F821
                  title=f"nqf training run {run} of experiment {snakemake.wildcards.exp}")  # noqa: F821
