# Helpers shared by the rules: get_* return paths/values for a rule, is_* answer
# questions. Entries are read here once, at parse time.
import os
import shlex
import sys

from snakemake.utils import validate

# Rules run `python -m dawnpipe`; make the package importable without installing
# it (conda envs from envs/*.yaml hold only third-party packages). Snakemake's
# own prefix for bash is `set -euo pipefail;`, which replacing it must keep.
SRC = os.path.join(workflow.basedir, "src")
sys.path.insert(0, SRC)
shell.prefix(f"set -euo pipefail; export PYTHONPATH='{SRC}'${{{{PYTHONPATH:+:$PYTHONPATH}}}}; ")  # braces doubled twice: f-string, then Snakemake's format

from dawnpipe.entries import config_hash, load_entry, run_settings  # noqa: E402
from dawnpipe.errors import DawnpipeError  # noqa: E402
from dawnpipe.infer.backends import backends_for, code_modules  # noqa: E402
from dawnpipe.infer.items import item_kind  # noqa: E402
from dawnpipe.tasks import get_task  # noqa: E402


validate(config, "../schemas/config.schema.yaml")

try:
    ENTRIES = {e: load_entry(os.path.join(config["entries_dir"], f"{e}.yaml")) for e in config["entries"]}
    for _entry in ENTRIES.values():
        get_task(_entry["task"])
except (DawnpipeError, OSError) as _err:
    raise WorkflowError(f"bad entry: {_err}")

try:
    for _id, _entry in ENTRIES.items():
        _items = item_kind(get_task(_entry["task"])).name
        if not backends_for(_entry["framework"], _items, config["inference"]["backends"]):
            raise DawnpipeError(f"entry {_id} ({_entry['framework']}, {_items} items): none of inference.backends "
                                f"{config['inference']['backends']} answers its items from its checkpoints")
except DawnpipeError as _err:
    raise WorkflowError(f"config inference.backends: {_err}")


wildcard_constraints:
    entry="|".join(ENTRIES),
    seed=r"\d+",
    task=r"[a-z0-9-]+",


def get_entry(wildcards):
    return ENTRIES[wildcards.entry]


def get_entry_file(wildcards):
    return os.path.join(config["entries_dir"], f"{wildcards.entry}.yaml")


def get_threshold(task_name):
    return float(config["thresholds"].get(task_name, get_task(task_name).threshold))


def get_prepared(wildcards):
    return f"data/prepared/{ENTRIES[wildcards.entry]['task']}"


def get_data_source_arg(wildcards):
    source = config["data_sources"].get(wildcards.task)
    return f"--source {source}" if source else ""


def get_data_checksums(wildcards):
    """The --expect file of a task (an input, so editing it fetches again), or nothing."""
    path = config["data_checksums"].get(wildcards.task)
    return [path] if path else []


def get_fetch_expect_arg(wildcards):
    return " ".join(f"--expect {p}" for p in get_data_checksums(wildcards))


def get_prepare_threads(wildcards):
    """ImageNet decodes in parallel (one process per CPU it may use); the others need one."""
    return max(1, workflow.cores or 1) if get_task(wildcards.task).data.get("kind") == "imagenet" else 1


def get_run_settings_hash(wildcards):
    """Everything that decides a training run's result. A params value, so an
    edited comment (in the config or an entry file) does not retrain, while any
    changed value does."""
    entry = dict(ENTRIES[wildcards.entry])
    task = get_task(entry["task"])
    settings = run_settings(
        entry, seed=int(wildcards.seed), threshold=get_threshold(entry["task"]),
        official_threshold=task.threshold, train_limit=config["train_limit"],
        test_limit=config["test_limit"], stop_at_threshold=config["stop_at_threshold"],
    )
    return config_hash(settings)


def get_train_args(wildcards):
    entry = ENTRIES[wildcards.entry]
    args = [f"--threshold {get_threshold(entry['task'])}"]
    if config["train_limit"]:
        args.append(f"--train-limit {config['train_limit']}")
    if config["test_limit"]:
        args.append(f"--test-limit {config['test_limit']}")
    if config["stop_at_threshold"]:
        args.append("--stop-at-threshold")
    return " ".join(args)


def get_telemetry_interval(wildcards):
    return float(config.get("telemetry", {}).get("interval_s", 1.0))


def get_flops_hash(wildcards):
    """What a FLOP count depends on: the network, its input and the step's
    batch, precision and memory format; not the optimizer or the schedule."""
    entry = ENTRIES[wildcards.entry]
    hp = entry["hyperparameters"]
    return config_hash({k: entry[k] for k in ("task", "framework", "model", "model_args")}
                       | {k: hp[k] for k in ("batch_size", "precision", "channels_last")})


def get_sensitivity_args(wildcards):
    """The config's sensitivity_ladders as `--<task> T1 T2 ...` (DVC's form of
    the same mapping); the command uses its run's task, else the task's ladder."""
    ladders = config.get("sensitivity_ladders", {})
    return " ".join(f"--{task} " + " ".join(f"{float(t)!r}" for t in ladder) for task, ladder in ladders.items())


def get_infer_args(wildcards):
    return f"--limit {config['test_limit']}" if config["test_limit"] else ""


def get_items_kind(entry_id):
    return item_kind(get_task(ENTRIES[entry_id]["task"])).name


def get_backends(entry_id):
    """Inference backends timed for an entry: those of config inference.backends
    that answer its task's items from its framework's checkpoints, in the config's order."""
    return backends_for(ENTRIES[entry_id]["framework"], get_items_kind(entry_id), config["inference"]["backends"])


def get_infer_code(wildcards):
    """The package code an entry's inference results depend on: the timing
    loop and its backends' own modules; editing another backend reruns nothing."""
    modules = {m for b in get_backends(wildcards.entry) for m in code_modules(b, get_items_kind(wildcards.entry))}
    files = [os.path.join(SRC, *m.split(".")) + ".py" for m in sorted(modules)]
    return [os.path.relpath(f) for f in files if os.path.exists(f)]


def get_train_env(wildcards):
    return "../../envs/train-tf.yaml" if is_tensorflow(wildcards) else "../../envs/train-torch.yaml"


def is_tensorflow(wildcards):
    return ENTRIES[wildcards.entry]["framework"] == "tensorflow"


def get_train_code(wildcards):
    """The package code a training run depends on: editing the trainer or a
    model retrains; editing the report does not."""
    pkg = os.path.join(SRC, "dawnpipe")
    files = ["train/cli.py", "train/logbook.py", "train/schedule.py", "train/data_source.py", "data/loader.py", "entries.py"]
    files += ["train/tf_trainer.py", "models/tf_zoo.py", "tf_runtime.py"] if is_tensorflow(wildcards) else [
        "train/torch_trainer.py", "models/torch_zoo.py", "train/distributed.py", "train/interruptions.py"]
    if get_task(ENTRIES[wildcards.entry]["task"]).data.get("kind") == "squad":
        files += ["train/squad_trainer.py", "models/squad_reader.py", "data/squad.py", "squad/text.py", "squad/evaluate.py"]
    return [os.path.relpath(os.path.join(pkg, f)) for f in files if os.path.exists(os.path.join(pkg, f))]


def get_run_dirs():
    return [f"results/runs/{e}/seed{s}" for e in ENTRIES for s in config["seeds"]]


def get_run_files(name):
    return [f"{d}/{name}" for d in get_run_dirs()]


def get_seed_results(wildcards):
    return [f"results/runs/{wildcards.entry}/seed{s}/time_to_accuracy.json" for s in config["seeds"]]


def get_tasks():
    return sorted({e["task"] for e in ENTRIES.values()})


def get_timed_threads():
    """Timed jobs take every core Snakemake was given (profiles may override
    with set-threads), so a measurement never shares the CPU with another job."""
    return max(1, workflow.cores or 1)


# ---- what a job asks of a cluster (the Slurm executor reads these resources;
# local runs ignore all but threads). Partitions and accounts: profiles only.


def get_layout(wildcards):
    """(nodes, processes per node) of an entry's data-parallel training."""
    layout = ENTRIES[wildcards.entry]["distributed"]
    return layout["nodes"], layout["processes_per_node"]


def get_world_size(wildcards):
    nodes, per_node = get_layout(wildcards)
    return nodes * per_node


def is_distributed(wildcards):
    return get_world_size(wildcards) > 1


def is_gpu(wildcards):
    """Only entries that insist on CUDA ask for GPUs: `auto` cannot know at
    submission time whether the node it lands on has one."""
    return ENTRIES[wildcards.entry]["device"] == "cuda"


def get_train_threads(wildcards):
    """CPU threads of each training process: a whole node's cores (the profile's
    `cores`) shared by the processes on it. The CLI's --threads is per process."""
    return max(1, get_timed_threads() // get_layout(wildcards)[1])


def get_train_mem_mb(wildcards):
    """Memory per node (sbatch --mem): the data set lives in every process."""
    return 4000 + 4000 * get_layout(wildcards)[1]


def get_train_gpus(wildcards):
    """GPUs of the whole job (sbatch --gpus): one per process, or none."""
    return get_world_size(wildcards) if is_gpu(wildcards) else 0


def get_train_cpus_per_gpu(wildcards):
    """sbatch --cpus-per-gpu for GPU jobs (the plugin uses it instead of
    --cpus-per-task when gpu > 0): each process's threads."""
    return get_train_threads(wildcards)


def get_train_mpi(wildcards):
    """`srun` for multi-process training. The plugin then submits --ntasks /
    --nodes and runs the rule's command once, in the batch step, and
    `dawnpipe train` starts the ranks with srun itself (dawnpipe.train.distributed).
    Empty for one process (the plugin then reads it as "not MPI")."""
    return "srun" if is_distributed(wildcards) else ""


def get_train_tasks(wildcards):
    return get_world_size(wildcards)


def get_train_nodes(wildcards):
    return get_layout(wildcards)[0]


def get_infer_gpus(wildcards):
    """Inference answers one item at a time in one process: one GPU for a CUDA entry."""
    return 1 if is_gpu(wildcards) else 0


def get_train_runtime(wildcards, attempt):
    """Minutes of walltime; grows with each retry after a timeout (and the
    retry resumes from the last finished epoch)."""
    return 120 * attempt


def get_infer_runtime(wildcards, attempt):
    return 60 * attempt


def get_runtime(minutes):
    """Walltime of a rule: `minutes` on the first attempt, growing with each retry."""

    def runtime(wildcards, attempt):
        return minutes * attempt

    return runtime


# Where `rule export_submissions` writes our runs as DAWNBench v1 submissions.
EXPORT_DIR = "results/submissions"


def is_own_export(path):
    return os.path.normpath(path) == EXPORT_DIR


def get_audit_rules(wildcards):
    """The config's audit_rules (YAML files merged over the package's audit
    rules, as ``dawnpipe audit --rules``): inputs, so editing one reruns the report."""
    return list(config["audit_rules"])


def get_submission_inputs(wildcards):
    """The report's submission inputs: our export as the directory its rule
    makes; another directory as the files in it, so that a changed or added
    submission reruns the report (a directory's own time stamp would not)."""
    inputs = []
    for d in config["submission_dirs"]:
        if is_own_export(d) or not os.path.isdir(d):
            inputs.append(d)  # made by a rule, or reported missing by Snakemake
            continue
        for root, dirs, files in os.walk(d):
            dirs[:] = sorted(x for x in dirs if not x.startswith("."))
            inputs += [os.path.join(root, f) for f in sorted(files) if not f.startswith(".")]
    return inputs
