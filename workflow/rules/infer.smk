# Inference latency and cost: one job per (entry, seed, backend), each its own
# result. Timed jobs take the whole machine (threads: all cores) and the
# `timing` resource, so two measurements never share the CPU; the framework
# itself uses config inference.threads of those cores.


rule infer:
    input:
        checkpoint="results/runs/{entry}/seed{seed}/model.pt",
        run="results/runs/{entry}/seed{seed}/run.json",
        data=get_prepared,
        prices=config["prices"],
        code=get_infer_code,
    output:
        result="results/runs/{entry}/seed{seed}/latency/{backend}.json",
        per_item="results/runs/{entry}/seed{seed}/latency/{backend}.parquet",
    log:
        "results/logs/infer/{entry}/seed{seed}/{backend}.log",
    benchmark:
        "results/benchmarks/infer/{entry}/seed{seed}/{backend}.tsv"
    params:
        args=get_infer_args,
        warmup=config["inference"]["warmup"],
        # framework threads; the job itself reserves the whole machine (threads:)
        framework_threads=config["inference"]["threads"],
    threads: get_timed_threads()
    resources:
        mem_mb=4000,
        runtime=get_infer_runtime,
        timing=1,
    conda:
        get_train_env
    shell:
        "python -m dawnpipe infer --backend {wildcards.backend} --checkpoint {input.checkpoint} --run-json {input.run}"
        " --data {input.data} --prices {input.prices} --out {output.result} --items-parquet {output.per_item}"
        " --threads {params.framework_threads} --warmup {params.warmup} {params.args} 2>&1 | tee {log}"
