# One rule per stage of the stage table (src/dawnpipe/pipeline/stages.py),
# which dvc.yaml is generated from too: the table says what a stage runs,
# reads, writes and is rerun on; common.smk says what a job asks of a cluster.
# `snakemake --list-rules` shows them; `dawnpipe pipeline dvc` writes DVC's
# view of the same stages. A function, not a loop body: a rule's shell command
# is evaluated when its job runs, and must see its own stage, not the loop's last.


def define_rule(stage):

    rule:
        name:
            stage.name
        input:
            **get_inputs(stage),
            code=get_code(stage),
        output:
            **get_outputs(stage),
        log:
            stage.log,
        benchmark:
            get_benchmark(stage)
        params:
            **get_params(stage),
        threads: get_threads(stage)
        resources:
            **get_resources(stage),
        conda:
            get_env(stage)
        shell:
            get_shell(stage)


for _stage in STAGES:
    define_rule(_stage)
