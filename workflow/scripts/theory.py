"""Rule theory: predictions from the structure statistics alone (no training)."""
from nqf.experiments import kind_of
from nqf.io.netcdf import write_dataset
from nqf.pipeline.jobs import job
from nqf.pipeline.validate import open_stage, with_data_config

cfg = snakemake.params.cfg  # noqa: F821
exp_cfg = snakemake.config["experiments"][snakemake.wildcards.exp]  # noqa: F821
with job(snakemake.log[0], "theory"):  # noqa: F821
    structure = open_stage(snakemake.input[0], "structure", exp_cfg, require=("r", "C"),  # noqa: F821
                           experiment=snakemake.wildcards.exp)  # noqa: F821
    ds = kind_of(cfg).theory(structure, cfg)
    ds.attrs["experiment"] = snakemake.wildcards.exp  # noqa: F821
    ds = with_data_config(ds, exp_cfg)
    write_dataset(ds, snakemake.output[0], config=cfg,  # noqa: F821
                  title=f"nqf theory of experiment {snakemake.wildcards.exp}")  # noqa: F821
