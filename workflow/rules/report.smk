# The leaderboard: JSON, one offline HTML page and a table of all runs.


rule report:
    input:
        tta=get_run_files("time_to_accuracy.json"),
        latency=get_run_files("latency"),  # latency/<backend>.json, found by the command in each run directory
        headlines=get_run_files("latency.json"),
        logs=get_run_files("train.parquet"),
        stability=expand("results/stability/{entry}.json", entry=ENTRIES),
        utilization=get_run_files("utilization.json"),
        sensitivity=get_run_files("sensitivity.json"),
        submissions=get_submission_inputs,
        audit_rules=get_audit_rules,
    output:
        json="results/leaderboard.json",
        html="results/leaderboard.html",
        table="results/runs.parquet",
        csv="results/runs.csv",
    log:
        "results/logs/report.log",
    params:
        runs=get_run_dirs(),
        name=config["name"],
        submissions=config["submission_dirs"],
        rules=lambda wildcards, input: " ".join(["--rules", *map(shlex.quote, input.audit_rules)]) if input.audit_rules else "",
    threads: 1
    resources:
        mem_mb=2000,
        runtime=get_runtime(10),
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m dawnpipe report --runs {params.runs} --stability {input.stability} --config-name {params.name}"
        " --submissions {params.submissions:q} {params.rules}"
        " --json {output.json} --html {output.html} --table {output.table} --csv {output.csv} > {log} 2>&1"
