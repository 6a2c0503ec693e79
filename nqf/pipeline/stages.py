"""The body of each workflow rule, as a function of explicit arguments.

Each ``workflow/scripts/<rule>.py`` is one call, ``run_stage("<rule>", snakemake)``: it takes the
rule's inputs, outputs, params, log and threads out of Snakemake's ``snakemake`` object and calls
the function of that name here, which knows nothing of Snakemake and can be called directly (a
test, a notebook). Every body runs inside :func:`nqf.pipeline.jobs.job` (the rule's log, one
sentence for a user error). What a job reads beyond its stage's config (the experiment's whole
config, the device, the call's :class:`~nqf.io.provenance.Origin`) comes from the rule's
``context`` param (:class:`nqf.pipeline.snakefile.RunContext`).

Imports are made inside each function: a job imports only what its stage needs (a figure job
no torch), which keeps job start-up short.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nqf.io.provenance import Origin
from nqf.pipeline.jobs import job

PathLike = str | os.PathLike


def data(exp: str, cfg: Mapping, output: PathLike, *, log: PathLike | None = None,
         origin: Origin | None = None) -> None:
    """Rule data: build experiment ``exp``'s inputs, targets and structure matrices into
    ``output`` (``cfg``: its data stage's config)."""
    from nqf.experiments import kind_of
    from nqf.io.netcdf import write_dataset

    with job(_path(log), "data", exp):
        ds = kind_of(cfg).make_data(cfg)
        ds.attrs["experiment"] = exp  # checked on read: nqf.pipeline.verify_stage
        write_dataset(ds, output, config=cfg, title=f"nqf data of experiment {exp}", origin=origin)


def structure(exp: str, cfg: Mapping, exp_cfg: Mapping, data_file: PathLike, output: PathLike, *,
              log: PathLike | None = None, origin: Origin | None = None) -> None:
    """Rule structure: Lotka-Volterra reduction and A(x) statistics from the data file."""
    from nqf.experiments import has_own_structure, structure_of
    from nqf.io.netcdf import write_dataset
    from nqf.pipeline.verify_stage import open_stage, with_data_config

    with job(_path(log), "structure", exp):
        # the generic reduction needs the targets; a kind's own structure checks what it reads
        require = () if has_own_structure(cfg) else ("y",)
        data_ds = open_stage(data_file, "data", exp_cfg, require=require, experiment=exp)
        ds = structure_of(data_ds, cfg)
        ds.attrs["experiment"] = exp
        ds = with_data_config(ds, exp_cfg)
        write_dataset(ds, output, config=cfg, title=f"nqf structure statistics of experiment {exp}",
                      origin=origin)


def theory(exp: str, cfg: Mapping, exp_cfg: Mapping, structure_file: PathLike, output: PathLike, *,
           log: PathLike | None = None, origin: Origin | None = None) -> None:
    """Rule theory: predictions from the structure statistics alone (no training)."""
    from nqf.experiments import kind_of
    from nqf.io.netcdf import write_dataset
    from nqf.pipeline.verify_stage import open_stage, with_data_config

    with job(_path(log), "theory", exp):
        structure_ds = open_stage(structure_file, "structure", exp_cfg, require=("r", "C"), experiment=exp)
        ds = kind_of(cfg).theory(structure_ds, cfg)
        ds.attrs["experiment"] = exp
        ds = with_data_config(ds, exp_cfg)
        write_dataset(ds, output, config=cfg, title=f"nqf theory of experiment {exp}", origin=origin)


def train(exp: str, run: str, cfg: Mapping, exp_cfg: Mapping, data_file: PathLike, output: PathLike, *,
          device: str, on_divergence: str = "stop", threads: int = 1, log: PathLike | None = None,
          origin: Origin | None = None) -> None:
    """Rule train: one training run; progress goes to the rule's log.

    The device comes from the global config, not from the stage's config: moving a sweep between
    CPU and GPU does not by itself rerun finished training jobs. Torch gets the job's threads (1
    unless the rule says otherwise): with one job per core, extra BLAS threads oversubscribe the
    cores (5-8x slower). A diverged run stops the job (``on_divergence`` stop) or is written marked
    diverged (record). A seed block's file names its run (attribute seed_block_of), so that fit
    and figure join them."""
    import torch

    from nqf.errors import TrainingDiverged
    from nqf.experiments import kind_of, split_run_id
    from nqf.experiments.divergence import diverged_run, stable_lr_clause, structure_for_hint
    from nqf.io import run_layout
    from nqf.io.netcdf import open_result, write_dataset
    from nqf.io.runs import with_run_coordinates
    from nqf.pipeline.verify_stage import open_stage, with_data_config

    base, block = split_run_id(exp_cfg, run)
    title = f"nqf training run {run} of experiment {exp}"
    torch.set_num_threads(max(1, threads))
    with job(_path(log), "train", f"{exp}/{run}") as logger:
        data_ds = open_stage(data_file, "data", exp_cfg, experiment=exp)
        try:
            ds = kind_of(cfg).train_run(data_ds, cfg, base, device=device)
        except TrainingDiverged as exc:
            # the structure file if that stage has run (results/runs/{exp}/{run}.nc ->
            # results/structure/{exp}.nc), else the stage computed here: only to word the message
            structure_file = Path(output).parents[2] / "structure" / f"{exp}.nc"
            structure_ds = (open_result(structure_file, made_by="structure") if structure_file.exists()
                            else structure_for_hint(data_ds, exp_cfg))
            exc.args = (str(exc) + stable_lr_clause(structure_ds, cfg),)
            if on_divergence != "record":
                raise
            logger.warning("%s Recorded as diverged (on_divergence: record).", exc)
            ds = diverged_run(exc, run, str(exc))
        if block is not None:
            ds.attrs.update(run=run, seed_block_of=base)
        ds.attrs.setdefault("run", run)
        # run parameters as scalar coordinates: the files of an experiment concatenate along 'run'
        ds = with_run_coordinates(ds, exp)
        ds = with_data_config(ds, exp_cfg)
        # on disk every variable along 'run' and no other index: plain xarray never pads it (nqf.io.run_layout)
        write_dataset(run_layout.to_file(ds), output, config=cfg, title=title, origin=origin)


def fit(exp: str, cfg: Mapping, exp_cfg: Mapping, structure_file: PathLike, theory_file: PathLike,
        run_files: Sequence[PathLike], output: PathLike, *, log: PathLike | None = None,
        origin: Origin | None = None) -> None:
    """Rule fit: measurements from the runs beside the theory, and the checked claims."""
    from nqf.experiments import kind_of, merge_seed_blocks, reading_of
    from nqf.experiments.claims import with_reading
    from nqf.experiments.divergence import diverged_runs, divergence_fit
    from nqf.io.netcdf import write_dataset
    from nqf.pipeline.verify_stage import check_derived, open_stage, run_dims_of_structure, with_data_config

    with job(_path(log), "fit", exp) as logger:
        structure_ds = open_stage(structure_file, "structure", exp_cfg, experiment=exp)
        theory_ds = open_stage(theory_file, "theory", exp_cfg, experiment=exp)
        check_derived(structure_ds, theory_ds, theory_file, "theory")
        files = {p: open_stage(p, "train", exp_cfg, experiment=exp) for p in run_files}
        for p, run in files.items():  # one z per structure mode, where the kind says so
            check_derived(structure_ds, run, p, "train", dims=run_dims_of_structure(cfg["kind"]))
        runs = merge_seed_blocks({Path(p).stem: run for p, run in files.items()})
        if diverged_runs(runs):
            logger.warning("runs %s diverged: fit skipped, one failing summary row each", sorted(diverged_runs(runs)))
            ds = divergence_fit(runs)
        else:
            ds = kind_of(cfg).fit(structure_ds, theory_ds, runs, cfg)
        ds = with_reading(ds, reading_of(cfg))
        ds.attrs["experiment"] = exp
        ds = with_data_config(ds, exp_cfg)
        write_dataset(ds, output, config=cfg, title=f"nqf fits of experiment {exp}", origin=origin)


def figure(exp: str, cfg: Mapping, exp_cfg: Mapping, style: Mapping, theory_file: PathLike,
           fit_file: PathLike, run_files: Sequence[PathLike], pdf: PathLike, png: PathLike,
           claims: PathLike, claims_html: PathLike, *, log: PathLike | None = None) -> None:
    """Rule figure: the experiment's figure as PDF and PNG (or a notice if runs diverged), and its
    checked claims as CSV and as the HTML table the report shows."""
    from nqf.experiments import figure_of, merge_seed_blocks
    from nqf.experiments.claims import summary_csv, summary_rows
    from nqf.experiments.divergence import diverged_runs, divergence_figure
    from nqf.io.netcdf import write_text
    from nqf.pipeline.report_html import claims_page
    from nqf.pipeline.verify_stage import open_stage

    paths = [pdf, png]
    with job(_path(log), "figure", exp):
        theory_ds = open_stage(theory_file, "theory", exp_cfg, experiment=exp)
        fit_ds = open_stage(fit_file, "fit", exp_cfg, experiment=exp)
        runs = merge_seed_blocks({Path(p).stem: open_stage(p, "train", exp_cfg, experiment=exp) for p in run_files})
        if diverged_runs(runs):
            divergence_figure(runs, cfg, paths, font_size=style["font_size"], dpi=style["dpi"])
        else:
            figure_of(cfg)(theory_ds, fit_ds, runs, cfg, paths, font_size=style["font_size"], dpi=style["dpi"])
        rows = summary_rows(exp, fit_ds)
        write_text(claims, summary_csv(rows))
        write_text(claims_html, claims_page(exp, rows, description=exp_cfg.get("description", "")))


def summary(experiments: Sequence[str], exp_cfgs: Mapping[str, Mapping], fit_files: Sequence[PathLike],
            output: PathLike, *, log: PathLike | None = None) -> None:
    """Rule summary: ``output`` (results/summary.csv), one row per checked claim of the fits of
    ``experiments`` (ids, in the order of ``fit_files``)."""
    from nqf.experiments.claims import summary_csv, summary_rows
    from nqf.io.netcdf import write_text
    from nqf.pipeline.verify_stage import open_stage

    with job(_path(log), "summary") as logger:
        rows = []
        for exp, path in zip(experiments, fit_files):
            rows += summary_rows(exp, open_stage(path, "fit", exp_cfgs[exp], experiment=exp))
        write_text(output, summary_csv(rows))
        # rows that hold by construction (nqf.experiments.claims.CHECKS) and rows the run could not
        # judge (judged False: not reached, run too short) are written but not counted as checked
        built = sum(r["checks"] == "construction" for r in rows)
        unjudged = [r for r in rows if r["checks"] != "construction" and not r["judged"]]
        checked = [r for r in rows if r["checks"] != "construction" and r["judged"]]
        failed = [r for r in checked if not r["passed"]]
        logger.info("%d claims checked, %d passed, %d failed (and %d rows that hold by construction, %d not judged "
                    "at this run length)", len(checked), sum(r["passed"] for r in checked), len(failed), built,
                    len(unjudged))
        for r in unjudged:
            logger.warning("NOT JUDGED %s: %s (%s)", r["experiment"], r["quantity"], r["note"][:200])
        for r in failed:
            logger.warning("FAILED %s: %s (measured %g, predicted %g, tolerance %g)", r["experiment"],
                           r["quantity"], r["measured"], r["predicted"], r["tolerance"])


def structure_figure(style: Mapping, pdf: PathLike, png: PathLike, *, log: PathLike | None = None) -> None:
    """Rule structure_figure: A(x) of every architecture side by side."""
    from nqf.plotting.structure_matrices import plot_structure_matrices

    with job(_path(log), "structure_figure"):
        plot_structure_matrices([pdf, png], font_size=style["font_size"], dpi=style["dpi"])


def reproduction(experiments: Mapping[str, Mapping], exp_cfgs: Mapping[str, Mapping],
                 fit_files: Sequence[PathLike], identity: Mapping[str, Any], md: PathLike, html: PathLike,
                 verdicts: PathLike, *, log: PathLike | None = None) -> None:
    """Rule reproduction: ``md`` and ``html`` (results/reproduction.md and .html), one section per
    paper figure, and ``verdicts``, the verdicts of the report's front page. ``experiments``: per
    id, what labels its section (nqf.pipeline.snakefile.Workflow.reproduction_params), its fit in
    ``fit_files`` in sorted id order; ``identity``: the config's identity."""
    import datetime

    from nqf.io.netcdf import write_text
    from nqf.pipeline.report_html import verdicts_fragment
    from nqf.pipeline.reproduction import collect, html_page, markdown
    from nqf.pipeline.verify_stage import open_stage

    with job(_path(log), "reproduction") as logger:
        fits = {exp: open_stage(path, "fit", exp_cfgs[exp], experiment=exp)
                for exp, path in zip(sorted(experiments), fit_files)}
        header = (f"Written {datetime.date.today().isoformat()} from `results/fits/*.nc` "
                  f"({len(fits)} experiments) by the workflow's reproduction rule.")
        collected = collect(fits, experiments)
        text = markdown(collected, header=header, config=identity)
        write_text(md, text)
        write_text(html, html_page(text))
        write_text(verdicts, verdicts_fragment(collected, config=identity))
        logger.info("wrote %s, %s and %s", md, html, verdicts)


def _path(log: PathLike | None) -> str | None:
    return None if log is None else str(log)


# -- from Snakemake's ``snakemake`` object -------------------------------------------------------

def run_stage(name: str, smk) -> None:
    """Run rule ``name``'s body with the inputs, outputs, params, log and threads of ``smk``, the
    ``snakemake`` object Snakemake hands a rule's script."""
    if name not in _FROM_SNAKEMAKE:
        raise ValueError(f"no workflow stage {name!r}; the stages are {', '.join(sorted(_FROM_SNAKEMAKE))}.")
    set_memory_budget(smk)
    _FROM_SNAKEMAKE[name](smk)


def set_memory_budget(smk) -> None:
    """The job's memory request (its ``mem_mb`` resource, what a cluster holds it to) as this
    process's budget: a training loop then hands the heap's free pages back before the allocator's
    retained memory takes it past the request, and where the request is a hard limit
    (:func:`memory_limit_is_hard`) also maps its large blocks on their own (nqf.training.heap)."""
    from nqf.training import heap

    mem_mb = getattr(getattr(smk, "resources", None), "mem_mb", None)
    heap.set_budget(float(mem_mb) if isinstance(mem_mb, (int, float)) and mem_mb > 0 else None,
                    hard=memory_limit_is_hard())


def memory_limit_is_hard(environ=os.environ) -> bool:
    """Whether this job's memory request is a limit that ends it (nqf.training.heap.set_budget):
    inside a SLURM job (SLURM_JOB_ID set), or where NQF_MEMORY_LIMIT is "hard"; "soft" says it
    is not (a local run, where Snakemake only schedules by it)."""
    setting = environ.get("NQF_MEMORY_LIMIT", "").strip().lower()
    if setting in ("hard", "soft"):
        return setting == "hard"
    return bool(environ.get("SLURM_JOB_ID"))


def _data(smk) -> None:
    data(smk.wildcards.exp, smk.params.cfg, smk.output[0], log=smk.log[0], origin=smk.params.context.origin)


def _structure(smk) -> None:
    exp, context = smk.wildcards.exp, smk.params.context
    structure(exp, smk.params.cfg, context.experiment(exp), smk.input[0], smk.output[0], log=smk.log[0],
              origin=context.origin)


def _theory(smk) -> None:
    exp, context = smk.wildcards.exp, smk.params.context
    theory(exp, smk.params.cfg, context.experiment(exp), smk.input[0], smk.output[0], log=smk.log[0],
           origin=context.origin)


def _train(smk) -> None:
    exp, context = smk.wildcards.exp, smk.params.context
    train(exp, smk.wildcards.run, smk.params.cfg, context.experiment(exp), smk.input[0], smk.output[0],
          device=context.config["device"], on_divergence=context.config.get("on_divergence", "stop"),
          threads=smk.threads, log=smk.log[0], origin=context.origin)


def _fit(smk) -> None:
    exp, context = smk.wildcards.exp, smk.params.context
    fit(exp, smk.params.cfg, context.experiment(exp), smk.input.structure, smk.input.theory, list(smk.input.runs),
        smk.output[0], log=smk.log[0], origin=context.origin)


def _figure(smk) -> None:
    exp, context = smk.wildcards.exp, smk.params.context
    figure(exp, smk.params.cfg, context.experiment(exp), smk.params.style, smk.input.theory, smk.input.fit,
           list(smk.input.runs), smk.output.pdf, smk.output.png, smk.output.claims, smk.output.claims_html,
           log=smk.log[0])


def _summary(smk) -> None:
    summary(smk.params.experiments, smk.params.context.config["experiments"], list(smk.input), smk.output[0],
            log=smk.log[0])


def _structure_figure(smk) -> None:
    structure_figure(smk.params.style, smk.output.pdf, smk.output.png, log=smk.log[0])


def _reproduction(smk) -> None:
    context = smk.params.context
    # the files and overrides of the run that computed these verdicts; params.config (its
    # experiments' hash) is what reruns this rule
    identity = {**context.identity, **smk.params.config}
    reproduction(smk.params.experiments, context.config["experiments"], list(smk.input), identity,
                 smk.output.md, smk.output.html, smk.output.verdicts, log=smk.log[0])


_FROM_SNAKEMAKE = {"data": _data, "structure": _structure, "theory": _theory, "train": _train, "fit": _fit,
                   "figure": _figure, "summary": _summary, "structure_figure": _structure_figure,
                   "reproduction": _reproduction}
