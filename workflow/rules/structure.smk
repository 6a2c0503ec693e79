rule structure:
    """A(x) statistics: Y, Lotka-Volterra r and C, the shared-eigenbasis residuals."""
    input:
        "results/data/{exp}.nc",
    output:
        "results/structure/{exp}.nc",
    log:
        "results/logs/structure/{exp}.log",
    benchmark:
        "results/benchmarks/structure/{exp}.tsv"
    conda:
        "../envs/nqf.yaml"
    threads: 1
    resources:
        mem_mb=NQF.resources.mem_mb("structure"),
        runtime=NQF.resources.runtime("structure"),
    params:
        cfg=NQF.stage_params("structure"),
        context=NQF.context,
    script:
        "../scripts/structure.py"
