rule fit:
    """Measured ignition times and errors beside the predictions, with the checked claims."""
    input:
        structure="results/structure/{exp}.nc",
        theory="results/theory/{exp}.nc",
        runs=NQF.run_files,
    output:
        "results/fits/{exp}.nc",
    log:
        "results/logs/fit/{exp}.log",
    benchmark:
        "results/benchmarks/fit/{exp}.tsv"
    conda:
        "../envs/nqf.yaml"
    threads: 1
    resources:
        mem_mb=NQF.resources.mem_mb("fit"),
        runtime=NQF.resources.runtime("fit"),
    params:
        cfg=NQF.stage_params("fit"),
        context=NQF.context,
    script:
        "../scripts/fit.py"
