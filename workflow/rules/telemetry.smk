# Where the time goes (issue 9): FLOPs once per entry, then per run the
# achieved FLOP/s, fraction of peak, energy (from the telemetry the train and
# infer rules sample) and time to accuracy at a ladder of thresholds.
# None of these is timed: one thread each, beside the timed jobs.


rule flops:
    input:
        data=get_prepared,
    output:
        "results/flops/{entry}.json",
    log:
        "results/logs/flops/{entry}.log",
    params:
        # the entry file is a param, not an input: its comments must not rerun anything
        entry=get_entry_file,
        counted=get_flops_hash,  # rerun trigger: what FLOPs depend on, not comments or the optimizer
    threads: 1
    resources:
        mem_mb=2000,
        runtime=get_runtime(10),
    conda:
        get_train_env
    shell:
        "python -m dawnpipe flops --entry {params.entry} --data {input.data} --out {output} > {log} 2>&1"


rule utilization:
    input:
        parquet="results/runs/{entry}/seed{seed}/train.parquet",
        run="results/runs/{entry}/seed{seed}/run.json",
        telemetry="results/runs/{entry}/seed{seed}/telemetry.parquet",
        inference_telemetry="results/runs/{entry}/seed{seed}/inference_telemetry.parquet",
        latency="results/runs/{entry}/seed{seed}/latency.json",
        flops="results/flops/{entry}.json",
    output:
        "results/runs/{entry}/seed{seed}/utilization.json",
    log:
        "results/logs/utilization/{entry}/seed{seed}.log",
    params:
        # the run's settings: changed ones rerun this job even where the run's own
        # files are gone (a retraining that failed or was interrupted removes them)
        run_settings=get_run_settings_hash,
    threads: 1
    resources:
        mem_mb=1000,
        runtime=get_runtime(5),
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m dawnpipe utilization --log-parquet {input.parquet} --run-json {input.run} --flops {input.flops}"
        " --telemetry {input.telemetry} --inference-telemetry {input.inference_telemetry} --latency-json {input.latency}"
        " --out {output} > {log} 2>&1"


rule sensitivity:
    input:
        tsv="results/runs/{entry}/seed{seed}/train.tsv",
        run="results/runs/{entry}/seed{seed}/run.json",
    output:
        "results/runs/{entry}/seed{seed}/sensitivity.json",
    log:
        "results/logs/sensitivity/{entry}/seed{seed}.log",
    params:
        # the run's settings: changed ones rerun this job even where the run's own
        # files are gone (a retraining that failed or was interrupted removes them)
        run_settings=get_run_settings_hash,
        ladder=get_sensitivity_args,
    threads: 1
    resources:
        mem_mb=500,
        runtime=get_runtime(5),
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m dawnpipe sensitivity --tsv {input.tsv} --run-json {input.run} --out {output} {params.ladder} > {log} 2>&1"
