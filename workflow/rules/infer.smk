# Inference latency and cost: one job per (entry, seed) times each backend of
# config inference.backends that reads the run's checkpoints, one after the
# other; each backend is its own result (latency/<backend>.json + .parquet),
# and latency.json is the run's headline (the fastest backend at the
# threshold). The same command as DVC's infer stage. Timed jobs take the whole
# machine (threads: all cores) and the `timing` resource, so two measurements
# never share the CPU; the framework itself uses inference.threads of them.


rule infer:
    input:
        checkpoint="results/runs/{entry}/seed{seed}/model.pt",
        run="results/runs/{entry}/seed{seed}/run.json",
        data=get_prepared,
        prices=config["prices"],
        code=get_infer_code,
    output:
        results=directory("results/runs/{entry}/seed{seed}/latency"),
        headline="results/runs/{entry}/seed{seed}/latency.json",
        per_item="results/runs/{entry}/seed{seed}/latency.parquet",
        telemetry="results/runs/{entry}/seed{seed}/inference_telemetry.parquet",
    log:
        "results/logs/infer/{entry}/seed{seed}.log",
    benchmark:
        "results/benchmarks/infer/{entry}/seed{seed}.tsv"
    params:
        # the run's settings: changed ones rerun this job even where the run's own
        # files are gone (a retraining that failed or was interrupted removes them)
        run_settings=get_run_settings_hash,
        args=get_infer_args,
        warmup=config["inference"]["warmup"],
        # framework threads; the job itself reserves the whole machine (threads:)
        framework_threads=config["inference"]["threads"],
        # all of the config's (the command skips those not for this run), as DVC passes them
        backends=" ".join(config["inference"]["backends"]),
        telemetry_interval=get_telemetry_interval,
    threads: get_timed_threads()
    resources:
        mem_mb=4000,
        runtime=get_infer_runtime,
        timing=1,
        gpu=get_infer_gpus,  # the GPU a CUDA entry answers on
        cpus_per_gpu=get_timed_threads(),
    conda:
        get_train_env
    shell:
        "python -m dawnpipe infer --checkpoint {input.checkpoint} --run-json {input.run} --data {input.data}"
        " --prices {input.prices} --out-dir {output.results} --out {output.headline} --items-parquet {output.per_item}"
        " --threads {params.framework_threads} --warmup {params.warmup} --backends {params.backends} {params.args}"
        " --telemetry {output.telemetry} --telemetry-interval {params.telemetry_interval} 2>&1 | tee {log}"
