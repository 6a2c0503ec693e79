"""Rule structure: Lotka-Volterra reduction and A(x) statistics from the data file."""
from nqf.experiments import has_own_structure, structure_of
from nqf.io.netcdf import write_dataset
from nqf.pipeline.jobs import job
from nqf.pipeline.validate import open_stage, with_data_config

cfg = snakemake.params.cfg  # noqa: F821
exp_cfg = snakemake.config["experiments"][snakemake.wildcards.exp]  # noqa: F821
with job(snakemake.log[0], "structure"):  # noqa: F821
    # the generic reduction needs the targets; a kind's own structure checks what it reads
    require = () if has_own_structure(cfg) else ("y",)
    data = open_stage(snakemake.input[0], "data", exp_cfg, require=require,  # noqa: F821
                      experiment=snakemake.wildcards.exp)  # noqa: F821
    ds = structure_of(data, cfg)
    ds.attrs["experiment"] = snakemake.wildcards.exp  # noqa: F821
    ds = with_data_config(ds, exp_cfg)
    write_dataset(ds, snakemake.output[0], config=cfg,  # noqa: F821
                  title=f"nqf structure statistics of experiment {snakemake.wildcards.exp}")  # noqa: F821
