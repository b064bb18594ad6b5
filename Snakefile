# dawnpipe: DAWNBench-style time-to-accuracy benchmark.
#   snakemake --cores all results/leaderboard.html                                  (config/config.yaml)
#   snakemake --cores all results/leaderboard.html --configfile config/test.yaml    (test.yaml laid over it)
# Rules only declare files; every computation is `dawnpipe <stage>`. The stages
# are defined once, in src/dawnpipe/pipeline/stages.py (dvc.yaml comes from there too).
from snakemake.utils import min_version

min_version("9.0")


include: "workflow/rules/common.smk"
include: "workflow/rules/stages.smk"


# Snakemake's periodic re-checks of its queue (max-jobs-per-timespan in
# profiles/) are timers that would hold the finished run until they fire.
onsuccess:
    cancel_queue_rechecks()


onerror:
    cancel_queue_rechecks()


rule all:
    input:
        "results/leaderboard.html",
        "results/leaderboard.json",
        "results/submissions",
