rule data:
    """Inputs, targets and structure matrices of one experiment."""
    output:
        "results/data/{exp}.nc",
    log:
        "results/logs/data/{exp}.log",
    benchmark:
        "results/benchmarks/data/{exp}.tsv"
    # Before every other job: the trainings wait on it, and a long one must be free to start first
    # (train's priority) rather than after the trainings whose data happened to be made first.
    priority: NQF.DATA_PRIORITY
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
