# One training run per (entry, seed). Timed jobs take the whole machine
# (threads: all cores) and the `timing` resource (1 in the profiles), so two
# measurements never share the CPU.


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
    threads: get_timed_threads()
    resources:
        mem_mb=8000,
        runtime=get_train_runtime,
        timing=1,
    conda:
        get_train_env
    shell:
        "python -m dawnpipe train --entry {params.entry} --seed {wildcards.seed} --data {input.data}"
        " --tsv {output.tsv} --log-parquet {output.parquet} --checkpoint {output.checkpoint}"
        " --run-json {output.run} --work-dir {params.work} --threads {threads} {params.args}"
        " --telemetry {output.telemetry} --telemetry-interval {params.telemetry_interval} 2>&1 | tee {log}"
