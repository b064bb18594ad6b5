"""The pipeline, written once: every stage's command, inputs, outputs, log,
the values it is rerun on, and what it needs of a machine. docs/pipeline.md
is generated from this table (``dawnpipe pipeline docs``): each stage, what
it reads and writes, what reruns it, its command, and the DAG.

Snakemake's rules (workflow/rules/stages.smk) and dvc.yaml (written by
``dawnpipe pipeline dvc``) are both made from this table, so the two cannot
disagree on a path, an argument or a rerun trigger; a caller outside the
pipeline (a bench script, a test) writes a stage's command with
``command_words`` from it too. A stage is per task, per entry, per run
(entry and seed), per study or once; paths are templates over those names
(``{task}``, ``{entry}``, ``{seed}``, ``{study}``). The values the table
computes per job are functions of dawnpipe.pipeline.values.

A command is its arguments in order: ``(flag, value)`` pairs and lone words.
A value is a literal, or a reference to the stage's inputs (``In``), outputs
(``Out``), per-job values (``Param``: one word, or a list of words), the
job's names (``Name``), a working directory the table places (``Work``) or
the job's threads (``THREADS``, Snakemake's alone: DVC runs one stage at a
time and lets the framework use every core). Every command runs as
``scripts/stage LOG dawnpipe ARGS``: its output goes to the terminal
(progress of long stages) and to the stage's log.

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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dawnpipe.pipeline.plan import RUN_DIR, Plan
from dawnpipe.pipeline.values import (
    DAWNBENCH_DIR,
    EXPORT_DIR,
    FLOP_INPUTS,
    PRICES,
    PROGRAMS_DIR,
    RECIPE,
    RUN_SETTINGS,
    STUDY_FILE,
    Job,
    Params,
    Value,
    all_runs,
    audit_rules,
    backend_modules,
    checksums,
    config,
    config_words,
    cpu_peak_probe,
    data_modules,
    dawnbench_archive,
    dawnbench_source,
    dawnbench_wanted,
    each_seed,
    entries_dir_words,
    entry_file,
    fetch_checksums,
    fetch_new_test,
    fetch_source,
    has_program_source,
    ladder,
    limit_words,
    mlperf_dirs,
    mlperf_files,
    mlperf_words,
    model_reader_env,
    prepare_threads,
    prepared,
    program_inputs,
    program_model_words,
    program_run_inputs,
    program_source,
    rules_words,
    run_dirs,
    run_settings_words,
    runs_dir,
    same_as_words,
    stability_files,
    studies_words,
    study_file,
    study_files,
    study_runs,
    study_seeds_words,
    submission_dir_words,
    submission_dirs,
    submission_files,
    telemetry_interval,
    train_env,
    trainer_modules,
    wants_program_source,
)

# -------------------------------------------------------------- the vocabulary
# What a stage has one job per: the names of its jobs.
PER_TASK, PER_ENTRY, PER_RUN, ONCE, PER_STUDY = ("task",), ("entry",), ("entry", "seed"), (), ("study",)


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
    name: str  # task, entry, seed or study


@dataclass(frozen=True)
class Work:
    """A working directory the table places (a path template; no output of
    the stage: neither tool removes or caches it). A caller outside the
    pipeline gives its own, or leaves it to the command's default."""

    name: str
    path: str


@dataclass(frozen=True)
class Threads:
    """The cores Snakemake's scheduler gave the job (``{threads}``); nothing under DVC."""

    name: str = "threads"


THREADS = Threads()
Word = In | Out | Param | Name | Work | Threads
Arg = str | Word | tuple[str, str | Word]  # a lone word, or a flag and its value


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
    paths (its ``shows``: the templates of what it gives, values.shows).
    ``dvc``: DVC's form where it differs (a directory standing for a list
    whose length varies from item to item of one stage)."""

    path: str | Value
    dvc: Value | None = None

    @property
    def shows(self) -> tuple[str, ...]:
        return (self.path,) if isinstance(self.path, str) else tuple(getattr(self.path, "shows", ()))


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
    args: tuple[Arg, ...]
    log: str
    params: dict[str, Value] = field(default_factory=dict)
    # rerun on these values (by value, not bytes): name -> (Snakemake's value, DVC's params)
    values: dict[str, tuple[Value, Params]] = field(default_factory=dict)
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

    def __post_init__(self):
        """Every word names something of the stage, and no name twice (a job's values are one mapping)."""
        seen: set[str] = set()
        for _, word in self.arguments():
            if isinstance(word, str):
                continue
            known = {In: self.inputs, Out: self.outputs, Param: self.params, Name: self.per}.get(type(word))
            if known is not None and word.name not in known:
                raise ValueError(f"stage {self.name}: {type(word).__name__}({word.name!r}) names nothing of the stage")
            if word.name in seen:
                raise ValueError(f"stage {self.name}: {word.name!r} is in its command twice")
            seen.add(word.name)

    def arguments(self) -> list[tuple[str | None, str | Word]]:
        """The command's arguments as (flag, value): flag None for a lone word."""
        return [(arg[0], arg[1]) if isinstance(arg, tuple) else (None, arg) for arg in self.args]


def as_words(value: Any) -> list[str]:
    return [str(w) for w in value] if isinstance(value, list | tuple) else [str(value)]


def command_words(stage: Stage, values: Mapping[str, Any], *, literal: Callable[[str], str] = str) -> list[str]:
    """The words of one job's command after ``dawnpipe`` (``--task-dir``s
    aside): ``stage.command``, then each argument in the table's order, a
    word's value taken from ``values`` by its name (threads: ``"threads"``);
    a value that is a list stands for its words. A word without a value
    (missing, or None) is left out with its flag: the command's own default.
    ``literal`` renders the table's literal words (Snakemake escapes them)."""
    out = [stage.command]
    for flag, word in stage.arguments():
        if isinstance(word, str):
            value = [literal(word)]
        elif values.get(word.name) is None:
            continue
        else:
            value = as_words(values[word.name])
        out += [literal(flag), *value] if flag is not None else value
    return out


def outputs_in(stage: Stage, directory: str | Path) -> dict[str, Path]:
    """The outputs of one run of ``stage`` put in ``directory`` (their names as
    the table has them in a run directory): for a run outside results/runs."""
    prefix = RUN_DIR + "/"
    found = {name: o.path for name, o in stage.outputs.items() if o.path.startswith(prefix)}
    return {name: Path(directory) / path.removeprefix(prefix) for name, path in found.items()}


# -------------------------------------------------------------- the stages
FETCH = Stage(
    "fetch",
    "fetch",
    PER_TASK,
    inputs={"expect": Input(checksums)},  # editing a checksum file fetches again
    outputs={"raw": Output("data/raw/{task}", directory=True)},
    args=(Name("task"), ("--dest", Out("raw")), ("--cache", Work("cache", "data/.partial/{task}")), Param("source"), Param("expect"), Param("new_test")),
    log="results/logs/fetch/{task}.log",
    params={"source": fetch_source, "expect": fetch_checksums, "new_test": fetch_new_test},
    config_keys=("tasks.{task}.data_source", "tasks.{task}.data_checksums", "tasks.{task}.new_test_source"),
    code=data_modules,
    needs=Needs(mem_mb=1000, runtime_min=60),
)

PREPARE = Stage(
    "prepare",
    "prepare",
    PER_TASK,
    inputs={"raw": Input("data/raw/{task}")},
    outputs={"prepared": Output("data/prepared/{task}", directory=True)},
    args=(Name("task"), ("--raw", In("raw")), ("--out", Out("prepared")), ("--workers", THREADS)),
    log="results/logs/prepare/{task}.log",
    code=data_modules,
    needs=Needs(mem_mb=4000, runtime_min=30, threads=prepare_threads),
)

# A program that is not in the project (program.source): its repository at the
# pinned commit, fetched into data/programs/<entry>/ before its runs train.
FETCH_PROGRAM = Stage(
    "fetch_program",
    "fetch-program",
    PER_ENTRY,
    inputs={},
    outputs={"checkout": Output(PROGRAMS_DIR, directory=True)},
    args=(("--url", Param("url")), ("--commit", Param("commit")), ("--dest", Out("checkout"))),
    log="results/logs/fetch_program/{entry}.log",
    params={"url": program_source("url"), "commit": program_source("commit")},
    needs=Needs(mem_mb=1000, runtime_min=30),
    when=wants_program_source,
    only=has_program_source,
)

TRAIN = Stage(
    "train",
    "train",
    PER_RUN,
    inputs={"data": Input(prepared), "program": Input(program_inputs)},
    outputs={
        "tsv": Output(f"{RUN_DIR}/train.tsv", kind="plot", plot={"x": "hours", "x_label": "training hours (evaluation excluded)"}),
        "parquet": Output(f"{RUN_DIR}/train.parquet"),
        "checkpoint": Output(f"{RUN_DIR}/model.pt"),
        "run": Output(f"{RUN_DIR}/run.json"),
        "telemetry": Output(f"{RUN_DIR}/telemetry.parquet"),
        "mllog": Output(f"{RUN_DIR}/train.mllog"),  # the run in MLCommons' MLLOG (dawnpipe.train.mllog_writer)
    },
    args=(
        ("--entry", Param("entry_file")),
        ("--seed", Name("seed")),
        ("--data", In("data")),
        ("--tsv", Out("tsv")),
        ("--log-parquet", Out("parquet")),
        ("--checkpoint", Out("checkpoint")),
        ("--run-json", Out("run")),
        ("--mllog", Out("mllog")),
        ("--work-dir", Work("work_dir", "results/.work/{entry}/seed{seed}")),
        ("--threads", THREADS),
        Param("settings"),
        ("--telemetry", Out("telemetry")),
        ("--telemetry-interval", Param("telemetry_interval")),
        ("--cpu-peak-probe-seconds", Param("cpu_peak_probe")),
    ),
    log="results/logs/train/{entry}/seed{seed}.log",
    # a new telemetry interval re-samples, and a new probe length probes, which takes the run again: deliberate rerun triggers
    params={"entry_file": entry_file, "settings": run_settings_words, "telemetry_interval": telemetry_interval, "cpu_peak_probe": cpu_peak_probe},
    values={"run_settings": RECIPE},
    config_keys=("tasks.{task}.threshold", "config.train_limit", "config.test_limit", "config.stop_at_threshold", "config.telemetry", "config.programs"),
    code=trainer_modules,
    needs=Needs(timed=True, mem_mb=8000, runtime_min=120),
    env=train_env,
    benchmark="results/benchmarks/train/{entry}/seed{seed}.tsv",
)

EXTRACT = Stage(
    "extract",
    "extract",
    PER_RUN,
    inputs={"tsv": Input(f"{RUN_DIR}/train.tsv"), "parquet": Input(f"{RUN_DIR}/train.parquet"), "run": Input(f"{RUN_DIR}/run.json")},
    outputs={"tta": Output(f"{RUN_DIR}/time_to_accuracy.json", kind="metric")},
    args=(("--tsv", In("tsv")), ("--log-parquet", In("parquet")), ("--run-json", In("run")), ("--prices", Param("prices")), ("--out", Out("tta"))),
    log="results/logs/extract/{entry}/seed{seed}.log",
    params={"prices": config("prices")},
    # the price table by value (a comment edit reruns nothing), not as a file
    values={"run_settings": RUN_SETTINGS, "prices": PRICES},
    needs=Needs(mem_mb=500, runtime_min=5),
)

INFER = Stage(
    "infer",
    "infer",
    PER_RUN,
    inputs={"checkpoint": Input(f"{RUN_DIR}/model.pt"), "run": Input(f"{RUN_DIR}/run.json"), "data": Input(prepared)},
    outputs={
        "results": Output(f"{RUN_DIR}/latency", directory=True),  # latency/<backend>.json + .parquet
        # the run's headline (fastest backend at the threshold): mean and p50/p90/p99 ms, cost per 10,000 items
        "headline": Output(f"{RUN_DIR}/latency.json", kind="metric"),
        "per_item": Output(f"{RUN_DIR}/latency.parquet"),
        "telemetry": Output(f"{RUN_DIR}/inference_telemetry.parquet"),
    },
    args=(
        ("--checkpoint", In("checkpoint")),
        ("--run-json", In("run")),
        ("--data", In("data")),
        ("--prices", Param("prices")),
        ("--out-dir", Out("results")),
        ("--out", Out("headline")),
        ("--items-parquet", Out("per_item")),
        ("--threads", Param("framework_threads")),
        ("--warmup", Param("warmup")),
        ("--backends", Param("backends")),
        ("--throughput-batches", Param("throughput_batches")),
        ("--throughput-seconds", Param("throughput_seconds")),
        Param("limit"),
        ("--telemetry", Out("telemetry")),
        ("--telemetry-interval", Param("telemetry_interval")),
    ),
    log="results/logs/infer/{entry}/seed{seed}.log",
    params={
        "prices": config("prices"),
        # framework threads; the job itself reserves the whole machine (Needs.timed)
        "framework_threads": config_words("inference", "threads"),
        "warmup": config_words("inference", "warmup"),
        # all of the config's: the command skips those not for this run's framework and items
        "backends": config_words("inference", "backends"),
        "throughput_batches": config_words("inference", "throughput_batches"),
        "throughput_seconds": config_words("inference", "throughput_seconds"),
        "limit": limit_words,
        "telemetry_interval": telemetry_interval,
    },
    values={"run_settings": RUN_SETTINGS, "prices": PRICES},
    config_keys=("config.inference", "config.test_limit", "config.telemetry"),
    code=backend_modules,
    needs=Needs(timed=True, mem_mb=4000, runtime_min=60),
    env=train_env,
    benchmark="results/benchmarks/infer/{entry}/seed{seed}.tsv",
)

FLOPS = Stage(
    "flops",
    "flops",
    PER_ENTRY,
    inputs={"data": Input(prepared)},
    outputs={"flops": Output("results/flops/{entry}.json")},
    args=(("--entry", Param("entry_file")), Param("entries_dir"), ("--data", In("data")), ("--out", Out("flops"))),
    log="results/logs/flops/{entry}.log",
    params={"entry_file": entry_file, "entries_dir": entries_dir_words},
    # what a FLOP count reads, not comments or the optimizer: a new lr retrains but does not recount
    values={"counted": FLOP_INPUTS},
    needs=Needs(mem_mb=2000, runtime_min=10),
    env=train_env,
)

UTILIZATION = Stage(
    "utilization",
    "utilization",
    PER_RUN,
    inputs={
        "parquet": Input(f"{RUN_DIR}/train.parquet"),
        "run": Input(f"{RUN_DIR}/run.json"),
        "telemetry": Input(f"{RUN_DIR}/telemetry.parquet"),
        "inference_telemetry": Input(f"{RUN_DIR}/inference_telemetry.parquet"),
        "latency": Input(f"{RUN_DIR}/latency.json"),
        "flops": Input("results/flops/{entry}.json"),
        "program_model": Input(program_run_inputs),  # a program run's FLOPs: from its model's graph
    },
    outputs={"utilization": Output(f"{RUN_DIR}/utilization.json")},
    args=(
        ("--log-parquet", In("parquet")),
        ("--run-json", In("run")),
        ("--flops", In("flops")),
        ("--telemetry", In("telemetry")),
        ("--inference-telemetry", In("inference_telemetry")),
        ("--latency-json", In("latency")),
        Param("program_model"),
        ("--out", Out("utilization")),
    ),
    log="results/logs/utilization/{entry}/seed{seed}.log",
    params={"program_model": program_model_words},
    values={"run_settings": RUN_SETTINGS},
    needs=Needs(mem_mb=2000, runtime_min=5),
    env=model_reader_env,
)

SENSITIVITY = Stage(
    "sensitivity",
    "sensitivity",
    PER_RUN,
    inputs={"tsv": Input(f"{RUN_DIR}/train.tsv"), "run": Input(f"{RUN_DIR}/run.json")},
    outputs={"sensitivity": Output(f"{RUN_DIR}/sensitivity.json")},
    args=(("--tsv", In("tsv")), ("--run-json", In("run")), ("--out", Out("sensitivity")), Param("ladder")),
    log="results/logs/sensitivity/{entry}/seed{seed}.log",
    params={"ladder": ladder},
    values={"run_settings": RUN_SETTINGS},
    config_keys=("tasks.{task}.sensitivity_ladder",),
    needs=Needs(mem_mb=500, runtime_min=5),
)

STABILITY = Stage(
    "stability",
    "stability",
    PER_ENTRY,
    # every seed's result; DVC: the entry's runs directory (an entry's number of seeds may differ from another's)
    inputs={"tta": Input(each_seed("time_to_accuracy.json"), dvc=runs_dir)},
    outputs={"stability": Output("results/stability/{entry}.json", kind="metric")},
    args=(("--entry", Name("entry")), ("--out", Out("stability")), In("tta")),
    log="results/logs/stability/{entry}.log",
    needs=Needs(mem_mb=500, runtime_min=5),
)

EXPORT_SUBMISSIONS = Stage(
    "export_submissions",
    "export",
    ONCE,
    inputs={
        "run": Input(all_runs("run.json")),
        "tta": Input(all_runs("time_to_accuracy.json")),
        "tsv": Input(all_runs("train.tsv")),
        "latency": Input(all_runs("latency.json")),
    },
    outputs={"submissions": Output(EXPORT_DIR, directory=True)},
    args=(("--runs", Param("runs")), ("--out", Out("submissions")), ("--author", Param("author")), ("--author-email", Param("email"))),
    log="results/logs/export_submissions.log",
    params={"runs": run_dirs, "author": config("submission_author", "name"), "email": config("submission_author", "email")},
    config_keys=("config.submission_author",),
    needs=Needs(mem_mb=500, runtime_min=5),
)

# The public DAWNBench entries (config dawnbench_entries): the archive of the
# entries repository, verified when a sha256 is given, unpacked safely; the
# report ranks them as one more submission directory.
DAWNBENCH = Stage(
    "dawnbench",
    "dawnbench",
    ONCE,
    inputs={"archive": Input(dawnbench_archive)},
    outputs={"entries": Output(DAWNBENCH_DIR, directory=True), "record": Output("data/dawnbench/fetch.json")},
    args=(("--dest", Out("entries")), ("--record", Out("record")), ("--cache", Work("cache", "data/.partial/dawnbench")), Param("source")),
    log="results/logs/dawnbench.log",
    params={"source": dawnbench_source},
    config_keys=("config.dawnbench_entries",),
    needs=Needs(mem_mb=1000, runtime_min=30),
    when=dawnbench_wanted,
)

REPORT = Stage(
    "report",
    "report",
    ONCE,
    inputs={
        "tta": Input(all_runs("time_to_accuracy.json")),
        "latency": Input(all_runs("latency")),  # latency/<backend>.json, found by the command in each run directory
        "headlines": Input(all_runs("latency.json")),
        "logs": Input(all_runs("train.parquet")),
        "stability": Input(stability_files),
        "utilization": Input(all_runs("utilization.json")),
        "sensitivity": Input(all_runs("sensitivity.json")),
        # DVC compares a directory by content: the directories themselves
        "submissions": Input(submission_files, dvc=submission_dirs),
        "mlperf": Input(mlperf_files, dvc=mlperf_dirs),
        "audit_rules": Input(audit_rules),
        "studies": Input(study_files),  # linked from the page
    },
    outputs={
        "json": Output("results/leaderboard.json"),
        "html": Output("results/leaderboard.html", report="Leaderboard"),
        "table": Output("results/runs.parquet"),
        "csv": Output("results/runs.csv"),
    },
    args=(
        ("--runs", Param("runs")),
        ("--stability", In("stability")),
        ("--config-name", Param("name")),
        Param("submissions"),
        Param("mlperf"),
        Param("rules"),
        Param("studies"),
        ("--json", Out("json")),
        ("--html", Out("html")),
        ("--table", Out("table")),
        ("--csv", Out("csv")),
    ),
    log="results/logs/report.log",
    params={
        "runs": run_dirs,
        "name": config("name"),
        "submissions": submission_dir_words,
        "mlperf": mlperf_words,
        "rules": rules_words,
        "studies": studies_words,
    },
    config_keys=("config.name", "config.submission_dirs", "config.mlperf_dirs", "config.mlperf_ruleset", "config.audit_rules", "config.studies"),
    needs=Needs(mem_mb=2000, runtime_min=10),
)

STUDY = Stage(
    "study",
    "study",
    PER_STUDY,
    inputs={"logs": Input(study_runs("train.parquet")), "runs": Input(study_runs("run.json"))},
    outputs={"json": Output("results/studies/{study}.json"), "html": Output("results/studies/{study}.html", report="Studies")},
    args=(
        "summarize",
        ("--study", Param("study_file")),
        ("--entries-dir", Param("entries_dir")),
        ("--runs", "results/runs"),
        Param("same_as"),
        Param("seeds"),
        ("--json", Out("json")),
        ("--html", Out("html")),
        ("--prices", Param("prices")),
    ),
    log="results/logs/study/{study}.log",
    params={
        "study_file": study_file,
        "entries_dir": config("entries_dir"),
        # variants whose recipe runs as another study's or the config's entry: the summary reads that run directory
        "same_as": same_as_words,
        # the config's study_seeds, in place of the study file's
        "seeds": study_seeds_words,
        "prices": config("prices"),  # the cost to accuracy of each variant
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
    FLOPS,
    UTILIZATION,
    SENSITIVITY,
    STABILITY,
    EXPORT_SUBMISSIONS,
    DAWNBENCH,
    REPORT,
    STUDY,
)
