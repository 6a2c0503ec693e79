"""Rule data: build an experiment's inputs, targets and structure matrices."""
from nqf.experiments import kind_of
from nqf.io.netcdf import write_dataset
from nqf.pipeline.jobs import job

cfg = snakemake.params.cfg  # noqa: F821 (injected by Snakemake)
with job(snakemake.log[0], "data"):  # noqa: F821
    ds = kind_of(cfg).make_data(cfg)
    ds.attrs["experiment"] = snakemake.wildcards.exp  # noqa: F821 (checked on read: nqf.pipeline.validate)
    write_dataset(ds, snakemake.output[0], config=cfg,  # noqa: F821
                  title=f"nqf data of experiment {snakemake.wildcards.exp}")  # noqa: F821
