rule figure:
    """The experiment's figure: experiment as markers or solid, theory dashed."""
    input:
        theory="results/theory/{exp}.nc",
        fit="results/fits/{exp}.nc",
        runs=NQF.run_files,
    output:
        # the report shows the PNG and the claims table inline; the PDF and the CSV are downloads
        pdf=report("results/figures/{exp}.pdf", category="{exp}", caption="../report/figure_pdf.rst"),
        png=report("results/figures/{exp}.png", category="{exp}", caption="../report/figure.rst"),
        claims=report("results/figures/{exp}.claims.csv", category="{exp}", caption="../report/claims.rst"),
        claims_html=report(
            "results/figures/{exp}.claims.html", category="{exp}", caption="../report/claims_table.rst"
        ),
    log:
        "results/logs/figures/{exp}.log",
    benchmark:
        "results/benchmarks/figure/{exp}.tsv"
    conda:
        "../envs/nqf.yaml"
    threads: 1
    resources:
        mem_mb=NQF.resources.mem_mb("figure"),
        runtime=NQF.resources.runtime("figure"),
    params:
        # (every param of a rule with report() outputs goes through report_params)
        cfg=report_params(NQF.stage_params("figure")),
        style=report_params(NQF.config["figures"]),
        context=report_params(NQF.context),
    script:
        "../scripts/figure.py"


rule summary:
    """One row per checked claim, across experiments."""
    input:
        expand("results/fits/{exp}.nc", exp=sorted(EXPERIMENTS)),
    output:
        report("results/summary.csv", category="summary", caption="../report/summary.rst"),
    log:
        "results/logs/summary.log",
    benchmark:
        "results/benchmarks/summary.tsv"
    conda:
        "../envs/nqf.yaml"
    threads: 1
    resources:
        mem_mb=NQF.resources.mem_mb("summary"),
        runtime=NQF.resources.runtime("summary"),
    params:
        # sorted: reordering experiments in a config must not rerun the summary
        experiments=report_params(sorted(EXPERIMENTS)),
        context=report_params(NQF.context),
    script:
        "../scripts/summary.py"


rule structure_figure:
    """The block pattern of A(x) for every architecture, side by side."""
    output:
        pdf=report(
            "results/figures/structure_matrices.pdf",
            category="structure_matrices",
            caption="../report/figure_pdf.rst",
        ),
        png=report(
            "results/figures/structure_matrices.png",
            category="structure_matrices",
            caption="../report/structure_matrices.rst",
        ),
    log:
        "results/logs/figures/structure_matrices.log",
    benchmark:
        "results/benchmarks/structure_figure.tsv"
    conda:
        "../envs/nqf.yaml"
    threads: 1
    resources:
        mem_mb=NQF.resources.mem_mb("structure_figure"),
        runtime=NQF.resources.runtime("structure_figure"),
    params:
        style=report_params(NQF.config["figures"]),
    script:
        "../scripts/structure_figure.py"


rule reproduction:
    """The one-page view: each paper figure with its claim, verdict, numbers and conditions."""
    input:
        expand("results/fits/{exp}.nc", exp=sorted(EXPERIMENTS)),
    output:
        md="results/reproduction.md",
        html=report(
            "results/reproduction.html", category="reproduction", caption="../report/reproduction.rst"
        ),
        # the verdicts table of the report's front page (workflow/report/workflow.rst inserts it)
        verdicts=report(
            "results/reproduction_verdicts.html",
            category="reproduction",
            caption="../report/verdicts.rst",
        ),
    log:
        "results/logs/reproduction.log",
    benchmark:
        "results/benchmarks/reproduction.tsv"
    conda:
        "../envs/nqf.yaml"
    threads: 1
    resources:
        mem_mb=NQF.resources.mem_mb("reproduction"),
        runtime=NQF.resources.runtime("reproduction"),
    params:
        experiments=report_params(NQF.reproduction_params()),
        config=report_params(NQF.verdict_identity),
        context=report_params(NQF.context),
    script:
        "../scripts/reproduction.py"
