"""Rule structure: Lotka-Volterra reduction and A(x) statistics from the data file."""
from nqf.experiments import KINDS
from nqf.experiments.common import form_from_dataset, structure_dataset
from nqf.experiments.jobs import job
from nqf.netcdf import open_result, write_dataset

with job(snakemake.log[0], "structure"):  # noqa: F821
    data = open_result(snakemake.input[0], made_by="data")  # noqa: F821
    kind = KINDS.get(data.attrs.get("experiment_kind", ""))
    if hasattr(kind, "structure"):  # factored data matrices that must not be densified
        ds = kind.structure(data)
    else:
        data = open_result(snakemake.input[0], made_by="data", require=("y",))  # noqa: F821
        ds, _ = structure_dataset(form_from_dataset(data), data["y"].values)
    ds.attrs["experiment_kind"] = data.attrs.get("experiment_kind", "")
    write_dataset(ds, snakemake.output[0],  # noqa: F821
                  title=f"nqf structure statistics of experiment {snakemake.wildcards.exp}")  # noqa: F821
