rule data:
    """Inputs, targets and structure matrices of one experiment."""
    output:
        "results/data/{exp}.nc",
    log:
        "results/logs/data/{exp}.log",
    benchmark:
        "results/benchmarks/data/{exp}.tsv"
    conda:
        "../envs/nqf.yaml"
    threads: 1
    resources:
        mem_mb=NQF.resources.mem_mb("data"),
        runtime=NQF.resources.runtime("data"),
    params:
        cfg=NQF.stage_params("data"),
        context=NQF.context,
    script:
        "../scripts/data.py"
