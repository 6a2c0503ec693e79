"""Rule structure: Lotka-Volterra reduction and A(x) statistics from the data file."""
from nqf.experiments import has_own_structure, structure_of
from nqf.experiments.jobs import job
from nqf.netcdf import open_result, write_dataset

with job(snakemake.log[0], "structure"):  # noqa: F821
    data = open_result(snakemake.input[0], made_by="data")  # noqa: F821
    if not has_own_structure(data):  # the generic reduction needs the targets
        data = open_result(snakemake.input[0], made_by="data", require=("y",))  # noqa: F821
    write_dataset(structure_of(data), snakemake.output[0],  # noqa: F821
                  title=f"nqf structure statistics of experiment {snakemake.wildcards.exp}")  # noqa: F821
