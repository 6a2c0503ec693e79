"""Rule structure_figure: A(x) of every architecture side by side."""
from nqf.plotting.structure_matrices import plot_structure_matrices
from nqf.pipeline.jobs import job

style = snakemake.params.style  # noqa: F821
with job(snakemake.log[0], "structure_figure"):  # noqa: F821
    plot_structure_matrices([snakemake.output.pdf, snakemake.output.png],  # noqa: F821
                            font_size=style["font_size"], dpi=style["dpi"])
