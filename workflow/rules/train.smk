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
    # Trainings first, the longest (by nqf's runtime model) first: they are the long jobs, and fits
    # and figures fill the cores at the end (nqf.pipeline.snakefile.Workflow.train_priority).
    priority: NQF.train_priority
    conda:
        "../envs/nqf.yaml"
    # One thread: torch gets the job's threads (nqf.pipeline.stages.train), and jobs fill the cores.
    threads: 1
    # Memory and runtime from nqf's estimate of this run, doubled on each retry
    # (nqf.pipeline.resources). gpu=1 only where the job trains on CUDA (device: cuda, or auto with
    # CUDA here), none on the CPU: `--resources gpu=1` runs one training at a time on the GPU
    # (docs/cluster.md).
    resources:
        mem_mb=NQF.resources.mem_mb("train"),
        runtime=NQF.resources.runtime("train"),
        gpu=NQF.train_gpu,
    params:
        cfg=NQF.run_params,
        context=NQF.context,
    script:
        "../scripts/train.py"
