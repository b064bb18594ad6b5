# One training run per (entry, seed). Timed jobs take the whole machine
# (threads: all cores) and the `timing` resource, of which profiles/default
# allows 1, so two measurements never share the CPU. profiles/slurm sets no
# `timing` limit (it would run one timed job at a time on the whole cluster):
# there each timed job asks for a node's cores (its `cores`) and Slurm's
# CR_Core keeps jobs off each other's cores. A data-parallel entry (distributed: in the
# entry) runs one process per GPU or per share of a node's cores: `dawnpipe
# train` starts them itself, with torchrun locally and srun inside a Slurm job
# (tasks/nodes/mpi below tell the Slurm plugin to allocate them).


rule train:
    input:
        data=get_prepared,
        code=get_train_code,
    output:
        tsv="results/runs/{entry}/seed{seed}/train.tsv",
        parquet="results/runs/{entry}/seed{seed}/train.parquet",
        checkpoint="results/runs/{entry}/seed{seed}/model.pt",
        run="results/runs/{entry}/seed{seed}/run.json",
        telemetry="results/runs/{entry}/seed{seed}/telemetry.parquet",
    log:
        "results/logs/train/{entry}/seed{seed}.log",
    benchmark:
        "results/benchmarks/train/{entry}/seed{seed}.tsv"
    params:
        entry=get_entry_file,
        settings_hash=get_run_settings_hash,  # rerun trigger: values, not comments
        args=get_train_args,
        work="results/.work/{entry}/seed{seed}",
        # a new interval re-samples, which takes the run again: a deliberate rerun trigger
        telemetry_interval=get_telemetry_interval,
    threads: get_train_threads  # per process; a node's cores over its processes
    resources:
        mem_mb=get_train_mem_mb,
        runtime=get_train_runtime,
        timing=1,
        gpu=get_train_gpus,
        cpus_per_gpu=get_train_cpus_per_gpu,
        tasks_per_gpu=1,  # otherwise the plugin passes `tasks` as --ntasks-per-gpu
        tasks=get_train_tasks,
        nodes=get_train_nodes,
        mpi=get_train_mpi,
    conda:
        get_train_env
    shell:
        "python -m dawnpipe train --entry {params.entry} --seed {wildcards.seed} --data {input.data}"
        " --tsv {output.tsv} --log-parquet {output.parquet} --checkpoint {output.checkpoint}"
        " --run-json {output.run} --work-dir {params.work} --threads {threads} {params.args}"
        " --telemetry {output.telemetry} --telemetry-interval {params.telemetry_interval} 2>&1 | tee {log}"
