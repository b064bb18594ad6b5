# Raw data -> verified files -> memory-mappable arrays.


rule fetch:
    input:
        get_data_checksums,
    output:
        directory("data/raw/{task}"),
    log:
        "results/logs/fetch/{task}.log",
    params:
        source=get_data_source_arg,
        expect=get_fetch_expect_arg,
        # partial downloads survive a failed job here (the output dir does not)
        cache="data/.partial/{task}",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=get_runtime(60),
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m dawnpipe fetch {wildcards.task} --dest {output} --cache {params.cache} {params.source} {params.expect} 2>&1 | tee {log}"


rule prepare:
    input:
        "data/raw/{task}",
    output:
        directory("data/prepared/{task}"),
    log:
        "results/logs/prepare/{task}.log",
    threads: get_prepare_threads
    resources:
        mem_mb=4000,
        runtime=get_runtime(30),
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m dawnpipe prepare {wildcards.task} --raw {input} --out {output} --workers {threads} > {log} 2>&1"
