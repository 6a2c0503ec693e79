rule data:
    """Inputs, targets and structure matrices of one experiment."""
    output:
        "results/data/{exp}.nc",
    log:
        "results/logs/data/{exp}.log",
    benchmark:
        "results/benchmarks/data/{exp}.tsv"
    params:
        cfg=NQF.stage_params("data"),
        context=NQF.context,
    script:
        "../scripts/data.py"
