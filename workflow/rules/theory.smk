rule theory:
    """Predictions before training: GLV and closed forms, ignition times, plateaus."""
    input:
        "results/structure/{exp}.nc",
    output:
        "results/theory/{exp}.nc",
    log:
        "results/logs/theory/{exp}.log",
    benchmark:
        "results/benchmarks/theory/{exp}.tsv"
    params:
        cfg=NQF.stage_params("theory"),
        context=NQF.context,
    script:
        "../scripts/theory.py"
