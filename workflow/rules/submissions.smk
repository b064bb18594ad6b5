# Our runs as DAWNBench v1 submissions (dawnpipe export), so they can be
# audited and submitted like anyone's. The report audits every directory of
# config["submission_dirs"] (by default just this export) and ranks the
# submissions with our runs; a run and its own export are shown once, from
# the run (dawnpipe.leaderboard.shown_as_runs).


rule export_submissions:
    input:
        run=get_run_files("run.json"),
        tta=get_run_files("time_to_accuracy.json"),
        tsv=get_run_files("train.tsv"),
        latency=get_run_files("latency.json"),
    output:
        directory(EXPORT_DIR),
    log:
        "results/logs/export_submissions.log",
    params:
        runs=get_run_dirs(),
        author=config["submission_author"]["name"],
        email=config["submission_author"]["email"],
    threads: 1
    resources:
        mem_mb=500,
        runtime=get_runtime(5),
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m dawnpipe export --runs {params.runs} --out {output} --author {params.author:q} --author-email {params.email:q} > {log} 2>&1"
