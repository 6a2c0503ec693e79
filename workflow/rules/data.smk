rule data:
    """Inputs, targets and structure matrices of one experiment."""
    output:
        "results/data/{exp}.nc",
    params:
        cfg=stage_params("data"),
    log:
        "results/logs/data/{exp}.log",
    benchmark:
        "results/benchmarks/data/{exp}.tsv"
    script:
        "../scripts/data.py"
