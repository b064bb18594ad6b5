# Numbers derived from the logs: time-to-accuracy and cost per run, stability per entry.


rule extract:
    input:
        tsv="results/runs/{entry}/seed{seed}/train.tsv",
        parquet="results/runs/{entry}/seed{seed}/train.parquet",
        run="results/runs/{entry}/seed{seed}/run.json",
        prices=config["prices"],
    output:
        "results/runs/{entry}/seed{seed}/time_to_accuracy.json",
    log:
        "results/logs/extract/{entry}/seed{seed}.log",
    params:
        # the run's settings: changed ones rerun this job even where the run's own
        # files are gone (a retraining that failed or was interrupted removes them)
        run_settings=get_run_settings_hash,
    threads: 1
    resources:
        mem_mb=500,
        runtime=get_runtime(5),
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m dawnpipe extract --tsv {input.tsv} --log-parquet {input.parquet} --run-json {input.run}"
        " --prices {input.prices} --out {output} > {log} 2>&1"


rule stability:
    input:
        get_seed_results,
    output:
        "results/stability/{entry}.json",
    log:
        "results/logs/stability/{entry}.log",
    threads: 1
    resources:
        mem_mb=500,
        runtime=get_runtime(5),
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m dawnpipe stability --entry {wildcards.entry} --out {output} {input} > {log} 2>&1"
