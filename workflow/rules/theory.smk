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
    conda:
        "../envs/nqf.yaml"
    threads: 1
    resources:
        mem_mb=NQF.resources.mem_mb("theory"),
        runtime=NQF.resources.runtime("theory"),
    params:
        cfg=NQF.stage_params("theory"),
        context=NQF.context,
    script:
        "../scripts/theory.py"
