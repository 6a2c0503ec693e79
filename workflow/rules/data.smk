rule data:
    """Inputs, targets and structure matrices of one experiment."""
    output:
        "results/data/{exp}.nc",
    log:
        "results/logs/data/{exp}.log",
    benchmark:
        "results/benchmarks/data/{exp}.tsv"
    params:
        cfg=stage_params("data"),
    script:
        "../scripts/data.py"
