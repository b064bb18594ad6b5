"""The pipeline, written once: every stage's command, inputs, outputs, log,
the values it is rerun on, and what it needs of a machine.

    fetch (task) -> prepare (task) -> train (run) -> extract, infer, sensitivity (run)
    flops (entry) -> utilization (run);  extract -> stability (entry)
    train, extract, infer -> export_submissions -> report (once)

Snakemake's rules (workflow/rules/stages.smk) and dvc.yaml (written by
``dawnpipe pipeline dvc``) are both made from this table, so the two cannot
disagree on a path, an argument or a rerun trigger. A stage is per task, per
entry, per run (entry and seed) or once; paths are templates over those
names (``{task}``, ``{entry}``, ``{seed}``).

A command is a list of words: literals, and references to the stage's
inputs (``In``), outputs (``Out``), per-job values (``Param``), the job's
names (``Name``) and the job's threads (``Threads``, Snakemake's alone: DVC
runs one stage at a time and lets the framework use every core). Every
command runs as ``scripts/stage LOG dawnpipe ARGS``: its output goes to the
terminal (progress of long stages) and to the stage's log.

Rerun triggers, chosen on purpose (docs/configuration.md, "What reruns"):
- everything in the command (paths, thresholds, limits) is one: Snakemake
  compares its params, DVC its cmd;
- ``values``: what the command reads from files by value (an entry's
  recipe, the prices), so a comment edit reruns nothing and a changed value
  reruns what uses it;
- the code the stage may run (dawnpipe.pipeline.codedeps: its module's
  imports) and its input files, by content (DVC) or time stamp (Snakemake).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dawnpipe.pipeline.plan import RUN, Plan

# -------------------------------------------------------------- the vocabulary
TASK, ENTRY, RUN_, ONCE, STUDY = ("task",), ("entry",), ("entry", "seed"), (), ("study",)


@dataclass(frozen=True)
class In:
    name: str


@dataclass(frozen=True)
class Out:
    name: str


@dataclass(frozen=True)
class Param:
    """A per-job value of ``Stage.params``: one word, or a list of words
    (an optional part of the command: empty when not set)."""

    name: str


@dataclass(frozen=True)
class Name:
    name: str  # task, entry or seed


@dataclass(frozen=True)
class Threads:
    """``FLAG {threads}`` under Snakemake (the cores its scheduler gave the job); nothing under DVC."""

    flag: str


Word = str | In | Out | Param | Name | Threads
Job = dict[str, str]  # the job's names: {"task": ...} or {"entry": ..., "seed": ...}
Value = Callable[[Plan, Job], Any]


@dataclass(frozen=True)
class Output:
    path: str
    directory: bool = False
    kind: str = "out"  # "out", "metric" (DVC metrics), "plot" (DVC plots)
    plot: dict[str, Any] | None = None  # DVC plot options (x, title, ...)
    report: str | None = None  # category in `snakemake --report` (marked with snakemake's report())


@dataclass(frozen=True)
class Input:
    """A path template, or a function of the job giving a path or a list of
    paths. ``dvc``: DVC's form where it differs (a directory standing for a
    list whose length varies from item to item of one stage)."""

    path: str | Value
    dvc: Value | None = None


@dataclass(frozen=True)
class Needs:
    """What a job asks of a machine (Snakemake's threads and resources; the
    Slurm plugin turns them into sbatch options). DVC runs one stage at a
    time and needs none of it."""

    timed: bool = False  # a measurement: the whole machine, never beside another timed job
    threads: Callable[..., int] | int = 1
    mem_mb: int = 1000
    runtime_min: int = 10  # walltime of the first attempt; grows with each retry


@dataclass(frozen=True)
class Stage:
    name: str
    command: str  # the dawnpipe command (dawnpipe.cli.COMMANDS)
    per: tuple[str, ...]
    inputs: dict[str, Input]
    outputs: dict[str, Output]
    args: tuple[Word, ...]
    log: str
    params: dict[str, Value] = field(default_factory=dict)
    # rerun on these values (by value, not bytes): name -> (Snakemake's value, DVC's params)
    values: dict[str, tuple[Value, Callable[[Plan, Job], dict[str, list[str] | None]]]] = field(default_factory=dict)
    # params.yaml keys whose values its command carries (DVC params, for `dvc params diff`);
    # "{task}": the job's task (tasks.<task>.* is the resolved per-task part, dawnpipe.pipeline.dvc)
    config_keys: tuple[str, ...] = ()
    code: Callable[[Plan], list[str]] | None = None  # modules picked by name at run time (registries)
    needs: Needs = Needs()
    env: str | Callable[[Plan, Job], str] = "report"  # envs/<env>.yaml for --sdm conda
    benchmark: str | None = None  # Snakemake's benchmark file (timed stages)
    # whether the configuration has this stage at all (None: always); DVC writes no stage without,
    # Snakemake's rule stays defined (it runs only when its output is asked for)
    when: Callable[[Plan], bool] | None = None
    # which of its jobs exist (None: every task, entry or run); DVC writes those alone, Snakemake
    # runs one only when another job's input asks for its output
    only: Callable[[Plan, Job], bool] | None = None


# -------------------------------------------------------------- shared values
def _entry(plan: Plan, job: Job):
    return plan.entries[job["entry"]]


def run_settings_value(plan: Plan, job: Job) -> str:
    """Everything that decides a run's result (hash): its entry's values, seed,
    threshold, limits and stop rule. Later stages of a run carry it too, so a
    changed setting reruns them even where a failed retraining removed the
    run's files."""
    return plan.values_hash(plan.run_settings(job["entry"], job["seed"]))


def entry_params(plan: Plan, job: Job) -> dict[str, list[str] | None]:
    """DVC: every value of the entry file (the run's other settings are in its
    command); a study variant's is its resolved recipe (plan.VARIANT_PARAMS),
    so it reruns when its base entry or its overrides change, and not when
    another variant of its study does."""
    return {_entry(plan, job).params_file: None}


def no_params(plan: Plan, job: Job) -> dict[str, list[str] | None]:
    """DVC: nothing; it compares the train stage's outputs a later stage reads by content."""
    return {}


def flops_value(plan: Plan, job: Job) -> str:
    return plan.values_hash(plan.flops_values(job["entry"]))


def flops_params(plan: Plan, job: Job) -> dict[str, list[str] | None]:
    from dawnpipe.pipeline.plan import FLOPS_HYPERPARAMETERS, FLOPS_KEYS

    # the same keys for every item (DVC's foreach body lists the first item's); a variant's resolved recipe has them all.
    # A program entry's file has none of them: with one in the configuration, every entry's whole file
    # (a zoo entry's new lr then recounts its FLOPs under DVC: seconds, and never a wrong count).
    if any("program" in e.recipe for e in plan.entries.values()):
        return {_entry(plan, job).params_file: None}
    return {_entry(plan, job).params_file: [*FLOPS_KEYS, *(f"hyperparameters.{k}" for k in FLOPS_HYPERPARAMETERS)]}


def prices_value(plan: Plan, job: Job) -> str:
    return plan.values_hash(plan.prices_values())


def prices_params(plan: Plan, job: Job) -> dict[str, list[str] | None]:
    return {plan.config["prices"]: None}


RECIPE = (run_settings_value, entry_params)  # the train stage's
RUN_SETTINGS = (run_settings_value, no_params)  # the later stages of a run
FLOPS = (flops_value, flops_params)
PRICES = (prices_value, prices_params)


def train_env(plan: Plan, job: Job) -> str:
    recipe = _entry(plan, job).recipe
    if "program" in recipe:  # somebody's program: the environment its entry names
        return recipe["program"]["conda_env"]
    return "train-tf" if recipe["framework"] == "tensorflow" else "train-torch"


PROGRAMS_DIR = "data/programs/{entry}"  # a program entry's fetched checkout (program.source)


def _has_source(plan: Plan, job: Job) -> bool:
    return bool(_entry(plan, job).recipe.get("program", {}).get("source"))


SCRIPT_SUFFIXES = (".py", ".sh", ".jl", ".R", ".lua", ".pl", ".rb")


def program_inputs(plan: Plan, job: Job) -> list[str]:
    """What a program entry's runs are made from, beside its entry's values: its
    fetched checkout, or the files its command names (a word with a '/' or a
    script's suffix, no placeholder) and its program.files, relative to its
    workdir (absolute where the program is kept outside the project); a change reruns its runs, and a missing one is named
    before anything runs. Nothing for a zoo entry. Written from the entry
    alone, not from what exists, so dvc.yaml is the same on every machine."""
    import os

    program = _entry(plan, job).recipe.get("program")
    if program is None:
        return []
    if program.get("source"):
        return [PROGRAMS_DIR.format(entry=job["entry"])]
    workdir = program["workdir"]

    def names_a_file(word: str) -> bool:  # an absolute one too: a program kept outside the project reruns as one inside it
        return "{" not in word and not word.startswith("-") and ("/" in word or word.endswith(SCRIPT_SUFFIXES))

    named = [w for w in program["command"] if names_a_file(w)]
    return sorted({os.path.normpath(os.path.join(workdir, f)) for f in (*named, *program["files"])})


def prepared(plan: Plan, job: Job) -> str:
    return f"data/prepared/{plan.task_of(job['entry'])}"


def words(*pairs: tuple[str, Any]) -> list[str]:
    """``--flag value`` for each pair whose value is set."""
    out: list[str] = []
    for flag, value in pairs:
        if value is None or value is False:
            continue
        out += [flag] if value is True else [flag, str(value)]
    return out


# -------------------------------------------------------------- the stages
def data_modules(plan: Plan) -> list[str]:
    """The data modules of the configuration's tasks (picked by name from their task files, at run time)."""
    return sorted({plan.task(t).data["module"] for t in plan.tasks()})


def _fetch_args(plan: Plan, job: Job) -> list[str]:
    return words(("--source", plan.config["data_sources"].get(job["task"])))


def _new_test_args(plan: Plan, job: Job) -> list[str]:
    """The task's new test set too, where an entry asks for it (and where from, if the config says)."""
    if not plan.wants_new_test(job["task"]):
        return []
    return ["--new-test", *words(("--new-test-source", plan.config["new_test_sources"].get(job["task"])))]


def _checksums(plan: Plan, job: Job) -> list[str]:
    path = plan.config["data_checksums"].get(job["task"])
    return [path] if path else []


FETCH = Stage(
    "fetch",
    "fetch",
    TASK,
    inputs={"expect": Input(_checksums)},  # editing a checksum file fetches again
    outputs={"raw": Output("data/raw/{task}", directory=True)},
    args=(Name("task"), "--dest", Out("raw"), "--cache", "data/.partial/{task}", Param("source"), Param("expect"), Param("new_test")),
    log="results/logs/fetch/{task}.log",
    params={"source": _fetch_args, "expect": lambda plan, job: [w for p in _checksums(plan, job) for w in ("--expect", p)], "new_test": _new_test_args},
    config_keys=("tasks.{task}.data_source", "tasks.{task}.data_checksums", "tasks.{task}.new_test_source"),
    code=lambda plan: data_modules(plan),
    needs=Needs(mem_mb=1000, runtime_min=60),
)


def _prepare_threads(plan: Plan, job: Job, cores: int) -> int:
    """A task whose data decodes in parallel (ImageNet) gets every core it may use; the others one."""
    return max(1, cores) if plan.task(job["task"]).data_kind.parallel_prepare else 1


PREPARE = Stage(
    "prepare",
    "prepare",
    TASK,
    inputs={"raw": Input("data/raw/{task}")},
    outputs={"prepared": Output("data/prepared/{task}", directory=True)},
    args=(Name("task"), "--raw", In("raw"), "--out", Out("prepared"), Threads("--workers")),
    log="results/logs/prepare/{task}.log",
    code=lambda plan: data_modules(plan),
    needs=Needs(mem_mb=4000, runtime_min=30, threads=_prepare_threads),
)


def _train_args(plan: Plan, job: Job) -> list[str]:
    c = plan.config
    return words(
        ("--threshold", repr(plan.threshold(plan.task_of(job["entry"])))),
        ("--train-limit", c["train_limit"]),
        ("--test-limit", c["test_limit"]),
        ("--stop-at-threshold", plan.stop_at_threshold(job["entry"])),
        ("--entries-dir", _variant_entries_dir(plan, job)),
        *_program_rules(plan, job),
    )


def _program_rules(plan: Plan, job: Job) -> list[tuple[str, str]]:
    """A program entry's clock allowances and test items kept back (config key programs); none for a zoo entry."""
    if "program" not in _entry(plan, job).recipe:
        return []
    rules = plan.run_settings(job["entry"], 0)["programs"]
    return [(flag, repr(rules[key])) for flag, key in PROGRAM_RULE_FLAGS]


PROGRAM_RULE_FLAGS = (
    ("--startup-allowance", "startup_allowance_cpu_seconds"),
    ("--evaluation-factor", "evaluation_factor"),
    ("--held-back", "held_back_fraction"),
)


def _variant_entries_dir(plan: Plan, job: Job) -> str | None:
    """Where a study variant's base entry is (the config's entries_dir); None for an entry file."""
    return plan.config["entries_dir"] if _entry(plan, job).is_variant else None


TRAIN = Stage(
    "train",
    "train",
    RUN_,
    inputs={"data": Input(prepared), "program": Input(program_inputs)},
    outputs={
        "tsv": Output(f"{RUN}/train.tsv", kind="plot", plot={"x": "hours", "x_label": "training hours (evaluation excluded)"}),
        "parquet": Output(f"{RUN}/train.parquet"),
        "checkpoint": Output(f"{RUN}/model.pt"),
        "run": Output(f"{RUN}/run.json"),
        "telemetry": Output(f"{RUN}/telemetry.parquet"),
        "mllog": Output(f"{RUN}/train.mllog"),  # the run in MLCommons' MLLOG (dawnpipe.train.mllog)
    },
    args=(
        "--entry",
        Param("entry_file"),
        "--seed",
        Name("seed"),
        "--data",
        In("data"),
        "--tsv",
        Out("tsv"),
        "--log-parquet",
        Out("parquet"),
        "--checkpoint",
        Out("checkpoint"),
        "--run-json",
        Out("run"),
        "--mllog",
        Out("mllog"),
        "--work-dir",
        "results/.work/{entry}/seed{seed}",
        Threads("--threads"),
        Param("settings"),
        "--telemetry",
        Out("telemetry"),
        "--telemetry-interval",
        Param("telemetry_interval"),
    ),
    log="results/logs/train/{entry}/seed{seed}.log",
    params={
        "entry_file": lambda plan, job: _entry(plan, job).file,
        "settings": _train_args,
        # a new interval re-samples, which takes the run again: a deliberate rerun trigger
        "telemetry_interval": lambda plan, job: repr(float(plan.config["telemetry"]["interval_s"])),
    },
    values={"run_settings": RECIPE},
    config_keys=("tasks.{task}.threshold", "config.train_limit", "config.test_limit", "config.stop_at_threshold", "config.telemetry", "config.programs"),
    code=lambda plan: trainer_modules(),
    needs=Needs(timed=True, mem_mb=8000, runtime_min=120),
    env=train_env,
    benchmark="results/benchmarks/train/{entry}/seed{seed}.tsv",
)


def trainer_modules() -> list[str]:
    """Every trainer an entry may pick (by kind of items and framework, at run time)."""
    from dawnpipe.train import TRAINERS

    return sorted(TRAINERS.values())


EXTRACT = Stage(
    "extract",
    "extract",
    RUN_,
    inputs={
        "tsv": Input(f"{RUN}/train.tsv"),
        "parquet": Input(f"{RUN}/train.parquet"),
        "run": Input(f"{RUN}/run.json"),
    },
    outputs={"tta": Output(f"{RUN}/time_to_accuracy.json", kind="metric")},
    args=("--tsv", In("tsv"), "--log-parquet", In("parquet"), "--run-json", In("run"), "--prices", Param("prices"), "--out", Out("tta")),
    log="results/logs/extract/{entry}/seed{seed}.log",
    params={"prices": lambda plan, job: plan.config["prices"]},
    # the price table by value (a comment edit reruns nothing), not as a file
    values={"run_settings": RUN_SETTINGS, "prices": PRICES},
    needs=Needs(mem_mb=500, runtime_min=5),
)


def _backend_modules(plan: Plan) -> list[str]:
    from dawnpipe.infer.backends import BACKENDS

    return sorted({b.module for b in BACKENDS if b.name in plan.config["inference"]["backends"]})


INFER = Stage(
    "infer",
    "infer",
    RUN_,
    inputs={
        "checkpoint": Input(f"{RUN}/model.pt"),
        "run": Input(f"{RUN}/run.json"),
        "data": Input(prepared),
    },
    outputs={
        "results": Output(f"{RUN}/latency", directory=True),  # latency/<backend>.json + .parquet
        # the run's headline (fastest backend at the threshold): mean and p50/p90/p99 ms, cost per 10,000 items
        "headline": Output(f"{RUN}/latency.json", kind="metric"),
        "per_item": Output(f"{RUN}/latency.parquet"),
        "telemetry": Output(f"{RUN}/inference_telemetry.parquet"),
    },
    args=(
        "--checkpoint",
        In("checkpoint"),
        "--run-json",
        In("run"),
        "--data",
        In("data"),
        "--prices",
        Param("prices"),
        "--out-dir",
        Out("results"),
        "--out",
        Out("headline"),
        "--items-parquet",
        Out("per_item"),
        "--threads",
        Param("framework_threads"),
        "--warmup",
        Param("warmup"),
        "--backends",
        Param("backends"),
        "--throughput-batches",
        Param("throughput_batches"),
        "--throughput-seconds",
        Param("throughput_seconds"),
        Param("limit"),
        "--telemetry",
        Out("telemetry"),
        "--telemetry-interval",
        Param("telemetry_interval"),
    ),
    log="results/logs/infer/{entry}/seed{seed}.log",
    params={
        "prices": EXTRACT.params["prices"],
        # framework threads; the job itself reserves the whole machine (Needs.timed)
        "framework_threads": lambda plan, job: str(plan.config["inference"]["threads"]),
        "warmup": lambda plan, job: str(plan.config["inference"]["warmup"]),
        # all of the config's: the command skips those not for this run's framework and items
        "backends": lambda plan, job: list(plan.config["inference"]["backends"]),
        "throughput_batches": lambda plan, job: [str(b) for b in plan.config["inference"]["throughput_batches"]],
        "throughput_seconds": lambda plan, job: str(plan.config["inference"]["throughput_seconds"]),
        "limit": lambda plan, job: words(("--limit", plan.config["test_limit"])),
        "telemetry_interval": TRAIN.params["telemetry_interval"],
    },
    values={"run_settings": RUN_SETTINGS, "prices": PRICES},
    config_keys=("config.inference", "config.test_limit", "config.telemetry"),
    code=_backend_modules,
    needs=Needs(timed=True, mem_mb=4000, runtime_min=60),
    env=train_env,
    benchmark="results/benchmarks/infer/{entry}/seed{seed}.tsv",
)

FLOPS_STAGE = Stage(
    "flops",
    "flops",
    ENTRY,
    inputs={"data": Input(prepared)},
    outputs={"flops": Output("results/flops/{entry}.json")},
    args=("--entry", Param("entry_file"), Param("entries_dir"), "--data", In("data"), "--out", Out("flops")),
    log="results/logs/flops/{entry}.log",
    params={"entry_file": TRAIN.params["entry_file"], "entries_dir": lambda plan, job: words(("--entries-dir", _variant_entries_dir(plan, job)))},
    # what a FLOP count reads, not comments or the optimizer: a new lr retrains but does not recount
    values={"counted": FLOPS},
    needs=Needs(mem_mb=2000, runtime_min=10),
    env=train_env,
)


def _program_run_inputs(plan: Plan, job: Job) -> list[str]:
    """A program run's model.pt and its task's prepared data (the items it was given); nothing for a zoo entry."""
    if "program" not in _entry(plan, job).recipe:
        return []
    return [RUN.format(entry=job["entry"], seed=job["seed"]) + "/model.pt", prepared(plan, job)]


def _program_run_args(plan: Plan, job: Job) -> list[str]:
    model_pt, data = _program_run_inputs(plan, job) or (None, None)
    return words(("--model", model_pt), ("--data", data))


UTILIZATION = Stage(
    "utilization",
    "utilization",
    RUN_,
    inputs={
        "parquet": Input(f"{RUN}/train.parquet"),
        "run": Input(f"{RUN}/run.json"),
        "telemetry": Input(f"{RUN}/telemetry.parquet"),
        "inference_telemetry": Input(f"{RUN}/inference_telemetry.parquet"),
        "latency": Input(f"{RUN}/latency.json"),
        "flops": Input("results/flops/{entry}.json"),
        "program_model": Input(lambda plan, job: _program_run_inputs(plan, job)),  # a program run's FLOPs: from its model's graph
    },
    outputs={"utilization": Output(f"{RUN}/utilization.json")},
    args=(
        "--log-parquet",
        In("parquet"),
        "--run-json",
        In("run"),
        "--flops",
        In("flops"),
        "--telemetry",
        In("telemetry"),
        "--inference-telemetry",
        In("inference_telemetry"),
        "--latency-json",
        In("latency"),
        Param("program_model"),
        "--out",
        Out("utilization"),
    ),
    log="results/logs/utilization/{entry}/seed{seed}.log",
    params={"program_model": lambda plan, job: _program_run_args(plan, job)},
    values={"run_settings": RUN_SETTINGS},
    needs=Needs(mem_mb=2000, runtime_min=5),
    env=lambda plan, job: train_env(plan, job) if "program" in _entry(plan, job).recipe else "report",  # onnx or TensorFlow reads its model
)


def _ladder(plan: Plan, job: Job) -> list[str]:
    ladder = plan.config["sensitivity_ladders"].get(plan.task_of(job["entry"]))
    return ["--ladder", *map(repr, map(float, ladder))] if ladder else []


SENSITIVITY = Stage(
    "sensitivity",
    "sensitivity",
    RUN_,
    inputs={"tsv": Input(f"{RUN}/train.tsv"), "run": Input(f"{RUN}/run.json")},
    outputs={"sensitivity": Output(f"{RUN}/sensitivity.json")},
    args=("--tsv", In("tsv"), "--run-json", In("run"), "--out", Out("sensitivity"), Param("ladder")),
    log="results/logs/sensitivity/{entry}/seed{seed}.log",
    params={"ladder": _ladder},
    values={"run_settings": RUN_SETTINGS},
    config_keys=("tasks.{task}.sensitivity_ladder",),
    needs=Needs(mem_mb=500, runtime_min=5),
)

STABILITY = Stage(
    "stability",
    "stability",
    ENTRY,
    # every seed's result; DVC: the entry's runs directory (an entry's number of seeds may differ from another's)
    inputs={"tta": Input(lambda plan, job: plan.seed_files(job["entry"], "time_to_accuracy.json"), dvc=lambda plan, job: f"results/runs/{job['entry']}")},
    outputs={"stability": Output("results/stability/{entry}.json", kind="metric")},
    args=("--entry", Name("entry"), "--out", Out("stability"), In("tta")),
    log="results/logs/stability/{entry}.log",
    needs=Needs(mem_mb=500, runtime_min=5),
)

# A program that is not in the project (program.source): its repository at the
# pinned commit, fetched into data/programs/<entry>/ before its runs train.
FETCH_PROGRAM = Stage(
    "fetch_program",
    "fetch-program",
    ENTRY,
    inputs={},
    outputs={"checkout": Output(PROGRAMS_DIR, directory=True)},
    args=("--url", Param("url"), "--commit", Param("commit"), "--dest", Out("checkout")),
    log="results/logs/fetch_program/{entry}.log",
    params={
        "url": lambda plan, job: _entry(plan, job).recipe["program"]["source"]["url"],
        "commit": lambda plan, job: _entry(plan, job).recipe["program"]["source"]["commit"],
    },
    needs=Needs(mem_mb=1000, runtime_min=30),
    when=lambda plan: any(e.recipe.get("program", {}).get("source") for e in plan.entries.values()),
    only=_has_source,
)

EXPORT_DIR = "results/submissions"
DAWNBENCH_DIR = "data/dawnbench/entries"


def _dawnbench_wanted(plan: Plan) -> bool:
    return bool(plan.config["dawnbench_entries"]["source"])


def _dawnbench_local(plan: Plan, job: Job) -> list[str]:
    """A local archive is an input (a new copy refetches); a URL is not a file."""
    from dawnpipe.data.files import is_url

    source = plan.config["dawnbench_entries"]["source"]
    return [source] if source and not is_url(source) else []


# The public DAWNBench entries (config dawnbench_entries): the archive of the
# entries repository, verified when a sha256 is given, unpacked safely; the
# report ranks them as one more submission directory.
DAWNBENCH = Stage(
    "dawnbench",
    "dawnbench",
    ONCE,
    inputs={"archive": Input(_dawnbench_local)},
    outputs={"entries": Output(DAWNBENCH_DIR, directory=True), "record": Output("data/dawnbench/fetch.json")},
    args=("--dest", Out("entries"), "--record", Out("record"), "--cache", "data/.partial/dawnbench", Param("source")),
    log="results/logs/dawnbench.log",
    params={
        "source": lambda plan, job: words(("--source", plan.config["dawnbench_entries"]["source"]), ("--sha256", plan.config["dawnbench_entries"]["sha256"]))
    },
    config_keys=("config.dawnbench_entries",),
    needs=Needs(mem_mb=1000, runtime_min=30),
    when=_dawnbench_wanted,
)


def _all_runs(name: str) -> Input:
    return Input(lambda plan, job: plan.run_files(name))


EXPORT = Stage(
    "export_submissions",
    "export",
    ONCE,
    inputs={"run": _all_runs("run.json"), "tta": _all_runs("time_to_accuracy.json"), "tsv": _all_runs("train.tsv"), "latency": _all_runs("latency.json")},
    outputs={"submissions": Output(EXPORT_DIR, directory=True)},
    args=("--runs", Param("runs"), "--out", Out("submissions"), "--author", Param("author"), "--author-email", Param("email")),
    log="results/logs/export_submissions.log",
    params={
        "runs": lambda plan, job: [plan.run_dir(e, s) for e, s in plan.runs()],
        "author": lambda plan, job: plan.config["submission_author"]["name"],
        "email": lambda plan, job: plan.config["submission_author"]["email"],
    },
    config_keys=("config.submission_author",),
    needs=Needs(mem_mb=500, runtime_min=5),
)


def _files_in_dirs(key: str):
    """The directories of config ``key`` as inputs: our export as the
    directory its stage makes; another directory as the files in it, so that
    a changed or added submission reruns the report (a directory's own time
    stamp would not)."""
    return lambda plan, job: _dir_files(plan.config[key])


def _submission_dirs(plan: Plan) -> list[str]:
    """The config's submission_dirs, and the public DAWNBench entries where the config fetches them."""
    return [*plan.config["submission_dirs"], *([DAWNBENCH_DIR] if _dawnbench_wanted(plan) else [])]


def _dir_files(dirs: list[str]) -> list[str]:
    import os

    inputs = []
    for d in dirs:
        if os.path.normpath(d) in (EXPORT_DIR, DAWNBENCH_DIR) or not os.path.isdir(d):
            inputs.append(d)  # made by a stage, or reported missing
            continue
        for root, dirs, files in os.walk(d):
            dirs[:] = sorted(x for x in dirs if not x.startswith("."))
            inputs += [os.path.join(root, f) for f in sorted(files) if not f.startswith(".")]
    return inputs


REPORT = Stage(
    "report",
    "report",
    ONCE,
    inputs={
        "tta": _all_runs("time_to_accuracy.json"),
        "latency": _all_runs("latency"),  # latency/<backend>.json, found by the command in each run directory
        "headlines": _all_runs("latency.json"),
        "logs": _all_runs("train.parquet"),
        "stability": Input(lambda plan, job: [f"results/stability/{e}.json" for e in plan.entries]),
        "utilization": _all_runs("utilization.json"),
        "sensitivity": _all_runs("sensitivity.json"),
        # DVC compares a directory by content: the directories themselves
        "submissions": Input(lambda plan, job: _dir_files(_submission_dirs(plan)), dvc=lambda plan, job: _submission_dirs(plan)),
        "mlperf": Input(_files_in_dirs("mlperf_dirs"), dvc=lambda plan, job: list(plan.config["mlperf_dirs"])),
        "audit_rules": Input(lambda plan, job: list(plan.config["audit_rules"])),
        "studies": Input(lambda plan, job: [f"results/studies/{s}.json" for s in plan.studies]),  # linked from the page
    },
    outputs={
        "json": Output("results/leaderboard.json"),
        "html": Output("results/leaderboard.html", report="Leaderboard"),
        "table": Output("results/runs.parquet"),
        "csv": Output("results/runs.csv"),
    },
    args=(
        "--runs",
        Param("runs"),
        "--stability",
        In("stability"),
        "--config-name",
        Param("name"),
        Param("submissions"),
        Param("mlperf"),
        Param("rules"),
        Param("studies"),
        "--json",
        Out("json"),
        "--html",
        Out("html"),
        "--table",
        Out("table"),
        "--csv",
        Out("csv"),
    ),
    log="results/logs/report.log",
    params={
        "runs": EXPORT.params["runs"],
        "name": lambda plan, job: plan.config["name"],
        "submissions": lambda plan, job: ["--submissions", *_submission_dirs(plan)],
        "mlperf": lambda plan, job: ["--mlperf", *plan.config["mlperf_dirs"], "--mlperf-ruleset", plan.config["mlperf_ruleset"]],
        "rules": lambda plan, job: [w for p in plan.config["audit_rules"] for w in ("--rules", p)],
        "studies": lambda plan, job: ["--studies", *(f"results/studies/{s}.json" for s in plan.studies)] if plan.studies else [],
    },
    config_keys=("config.name", "config.submission_dirs", "config.mlperf_dirs", "config.mlperf_ruleset", "config.audit_rules", "config.studies"),
    needs=Needs(mem_mb=2000, runtime_min=10),
)


def _study_value(plan: Plan, job: Job) -> str:
    return plan.values_hash(plan.studies[job["study"]].doc)


def _study_params(plan: Plan, job: Job) -> dict[str, list[str] | None]:
    return {plan.studies[job["study"]].file: None}


STUDY_FILE = (_study_value, _study_params)

STUDY_STAGE = Stage(
    "study",
    "study",
    STUDY,
    inputs={
        "logs": Input(lambda plan, job: [f"{d}/train.parquet" for d in plan.study_runs(job["study"])]),
        "runs": Input(lambda plan, job: [f"{d}/run.json" for d in plan.study_runs(job["study"])]),
    },
    outputs={"json": Output("results/studies/{study}.json"), "html": Output("results/studies/{study}.html", report="Studies")},
    args=(
        "summarize",
        "--study",
        Param("study_file"),
        "--entries-dir",
        Param("entries_dir"),
        "--runs",
        "results/runs",
        Param("same_as"),
        Param("seeds"),
        "--json",
        Out("json"),
        "--html",
        Out("html"),
        "--prices",
        Param("prices"),
    ),
    log="results/logs/study/{study}.log",
    params={
        "study_file": lambda plan, job: plan.studies[job["study"]].file,
        "entries_dir": lambda plan, job: plan.config["entries_dir"],
        # variants whose recipe runs as another study's or the config's entry: the summary reads that run directory
        "same_as": lambda plan, job: [w for vid, e in plan.shared_runs(job["study"]).items() for w in ("--same-as", vid, e)],
        # the config's study_seeds, in place of the study file's
        "seeds": lambda plan, job: ["--seeds", *map(str, plan.config["study_seeds"])] if plan.config["study_seeds"] is not None else [],
        "prices": EXTRACT.params["prices"],  # the cost to accuracy of each variant
    },
    # the study file by value too: a new ladder or description summarizes again, a comment does not
    values={"prices": PRICES, "study": STUDY_FILE},
    config_keys=("config.studies_dir", "config.entries_dir", "config.study_seeds"),
    needs=Needs(mem_mb=2000, runtime_min=10),
)

STAGES: tuple[Stage, ...] = (
    FETCH,
    PREPARE,
    FETCH_PROGRAM,
    TRAIN,
    EXTRACT,
    INFER,
    FLOPS_STAGE,
    UTILIZATION,
    SENSITIVITY,
    STABILITY,
    EXPORT,
    DAWNBENCH,
    REPORT,
    STUDY_STAGE,
)
