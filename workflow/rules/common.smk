# The Snakemake side of the stage table (src/dawnpipe/pipeline/stages.py):
# the configuration, resolved in layers (dawnpipe.pipeline.config), one Plan
# of entries and runs, and the get_*/is_* helpers stages.smk hands the table's
# stages to Snakemake with. What a job asks of a cluster (threads, memory,
# walltime, GPUs, processes) is here: it is Snakemake's and Slurm's alone.
import os
import shlex
import sys

# Rules run `scripts/stage LOG dawnpipe ...`, which puts this checkout's src/
# first on PYTHONPATH (conda envs from envs/*.yaml hold only third-party
# packages); the Snakefile imports the package from there too.
SRC = os.path.join(workflow.basedir, "src")
sys.path.insert(0, SRC)

from snakemake.settings.types import DeploymentMethod  # noqa: E402

from dawnpipe.display import terminal_safe  # noqa: E402
from dawnpipe.errors import DawnpipeError  # noqa: E402
from dawnpipe.pipeline import render  # noqa: E402
from dawnpipe.pipeline.config import resolve, typed_cli_values  # noqa: E402
from dawnpipe.pipeline.plan import Plan  # noqa: E402
from dawnpipe.pipeline.stages import STAGES, Threads  # noqa: E402

# Without --sdm conda a job runs the interpreter Snakemake itself runs under,
# so `.venv/bin/snakemake ...` works without activating the venv; with it,
# the env's own python (scripts/stage falls back to `python` in the env).
if DeploymentMethod.CONDA not in workflow.deployment_settings.deployment_method:
    shell.prefix(f"set -euo pipefail; export DAWNPIPE_PYTHON={shlex.quote(sys.executable)}; ")

try:
    CONFIG = resolve([os.path.relpath(f, workflow.basedir) for f in workflow.config_settings.configfiles], typed_cli_values(workflow.config_settings.config), root=Path(workflow.basedir))
    PLAN = Plan(CONFIG)
except DawnpipeError as _err:  # bad input: one line, before any job (Snakemake would add its own traceback)
    print(f"dawnpipe: error: {terminal_safe(str(_err))}", file=sys.stderr)
    sys.exit(1)
config.clear()
config.update(CONFIG.values)
ENTRIES = PLAN.entries
STAGE_SCRIPT = os.path.join(workflow.basedir, render.STAGE_SCRIPT)


def _regex_alternatives(names):
    import re

    return "|".join(re.escape(n) for n in names) or "(?!)"


wildcard_constraints:
    entry=_regex_alternatives(ENTRIES),
    seed=r"\d+",
    task=r"[A-Za-z0-9._-]+",
    study=_regex_alternatives(PLAN.studies),


def _job(wildcards):
    return {k: str(v) for k, v in wildcards.items()}


def get_inputs(stage):
    """The stage's inputs: path templates as they are, functions per job."""
    out = {}
    for name, spec in stage.inputs.items():
        if isinstance(spec.path, str):
            out[name] = spec.path
        else:
            out[name] = (lambda path: lambda wildcards: path(PLAN, _job(wildcards)))(spec.path)
    return out


def get_outputs(stage):
    """The stage's outputs; those the table marks for `snakemake --report` wrapped in report()."""
    out = {}
    for name, o in stage.outputs.items():
        path = directory(o.path) if o.directory else o.path
        out[name] = report(path, category=o.report, labels={"output": name}) if o.report else path
    return out


def get_params(stage):
    """The command's per-job values (shell-quoted), and the values it is rerun on."""
    params = {name: (lambda name: lambda wildcards: render.snakemake_param(stage, name, PLAN, _job(wildcards)))(name) for name in stage.params}
    if stage.values:
        params["values"] = lambda wildcards: render.values_hash(stage, PLAN, _job(wildcards))
    return params


def get_code(stage):
    return render.code(stage, PLAN, Path(SRC))


def get_benchmark(stage):
    return stage.log.replace("results/logs/", "results/benchmarks/", 1).removesuffix(".log") + ".tsv"


def get_env(stage):
    if isinstance(stage.env, str):
        return f"../../envs/{stage.env}.yaml"
    return lambda wildcards: f"../../envs/{stage.env(PLAN, _job(wildcards))}.yaml"


# ---- what a job asks of a cluster (the Slurm executor reads these resources;
# local runs ignore all but threads). Partitions and accounts: profiles only.


def get_timed_threads():
    """Timed jobs take every core Snakemake was given (profiles may override
    with set-threads), so a measurement never shares the CPU with another job."""
    return max(1, workflow.cores or 1)


def get_layout(wildcards):
    """(nodes, processes per node) of an entry's data-parallel training."""
    layout = ENTRIES[wildcards.entry].recipe["distributed"]
    return layout["nodes"], layout["processes_per_node"]


def is_distributed(wildcards):
    nodes, per_node = get_layout(wildcards)
    return nodes * per_node > 1


def is_gpu(wildcards):
    """Only entries that insist on CUDA ask for GPUs: `auto` cannot know at
    submission time whether the node it lands on has one."""
    return ENTRIES[wildcards.entry].recipe["device"] == "cuda"


def get_threads(stage):
    """Threads of a job: a timed job's process takes a whole node's cores (the
    profile's `cores`) shared by the processes on it (the CLI's --threads is
    per process); an untimed one what the table says."""
    if stage.needs.timed:
        if stage.name == "train":
            return lambda wildcards: max(1, get_timed_threads() // get_layout(wildcards)[1])
        return get_timed_threads()
    if callable(stage.needs.threads):
        return lambda wildcards: stage.needs.threads(PLAN, _job(wildcards), get_timed_threads())
    return stage.needs.threads


def get_runtime(minutes):
    """Walltime of a rule: `minutes` on the first attempt, growing with each
    retry (a retried training resumes from its last finished epoch)."""

    def runtime(wildcards, attempt):
        return minutes * attempt

    return runtime


def get_resources(stage):
    resources = {"mem_mb": stage.needs.mem_mb, "runtime": get_runtime(stage.needs.runtime_min)}
    if stage.needs.timed:
        # profiles/default allows one `timing` at a time, so two measurements never share the CPU.
        # Snakemake reads profiles/default beside --profile profiles/slurm too, so jobs sent to a
        # cluster take none (one at a time would serialise the cluster): there CR_Core keeps jobs apart.
        resources["timing"] = lambda wildcards: 1 if workflow.local_exec else 0
    if stage.name == "train":
        # Memory per node (the data set lives in every process); GPUs of the whole job (one per process);
        # sbatch --cpus-per-gpu for GPU jobs (each process's threads). Multi-process training: `srun`
        # makes the plugin submit --ntasks/--nodes and run the command once, in the batch step, and
        # `dawnpipe train` starts the ranks with srun itself (dawnpipe.train.distributed); empty for
        # one process (the plugin then reads it as "not MPI").
        resources |= {
            "mem_mb": lambda wildcards: 4000 + 4000 * get_layout(wildcards)[1],
            "gpu": lambda wildcards: get_layout(wildcards)[0] * get_layout(wildcards)[1] if is_gpu(wildcards) else 0,
            "cpus_per_gpu": lambda wildcards: max(1, get_timed_threads() // get_layout(wildcards)[1]),
            "tasks_per_gpu": 1,  # otherwise the plugin passes `tasks` as --ntasks-per-gpu
            "tasks": lambda wildcards: get_layout(wildcards)[0] * get_layout(wildcards)[1],
            "nodes": lambda wildcards: get_layout(wildcards)[0],
            "mpi": lambda wildcards: "srun" if is_distributed(wildcards) else "",
        }
    elif stage.name == "infer":
        # inference answers one item at a time in one process: one GPU for a CUDA entry
        resources |= {"gpu": lambda wildcards: 1 if is_gpu(wildcards) else 0, "cpus_per_gpu": get_timed_threads()}
    return resources


def get_shell(stage):
    return render.shell_template(stage, STAGE_SCRIPT, PLAN)


def get_run_files(name):
    return PLAN.run_files(name)


def cancel_queue_rechecks():
    """Cancel the timers Snakemake's scheduler leaves pending when a run ends:
    one re-check of the job queue per max-jobs-per-timespan (profiles/), which
    the interpreter would otherwise wait for before exiting."""
    import threading

    for thread in threading.enumerate():
        if isinstance(thread, threading.Timer):
            thread.cancel()
