rule train:
    """One training run (model x optimizer x init x seed) of one experiment."""
    input:
        "results/data/{exp}.nc",
    output:
        "results/runs/{exp}/{run}.nc",
    log:
        "results/logs/train/{exp}/{run}.log",
    benchmark:
        "results/benchmarks/train/{exp}/{run}.tsv"
    # Trainings first: they are the long jobs, and fits and figures fill the cores at the end.
    priority: 1
    resources:
        runtime=60,
        mem_mb=4000,
    params:
        cfg=NQF.run_params,
        context=NQF.context,
    script:
        "../scripts/train.py"
