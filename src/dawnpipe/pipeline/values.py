"""The values of the stage table (dawnpipe.pipeline.stages), one function
each: what a job of a stage reads, the words of its command, what reruns it,
its environment, its threads and which of its jobs exist.

Each takes the Plan and the job's names (``{"task": ...}``, ``{"entry": ...,
"seed": ...}``, ``{"study": ...}``) and reads the configuration through the
Plan, so both front ends compute the same value. The first line of a
function's docstring is what docs/pipeline.md says of it; an input's path
template (``shows``) is what the page shows and what its picture of the DAG
joins a stage's inputs to another's outputs by.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from dawnpipe.pipeline.plan import RUN_DIR, Plan

Job = dict[str, str]  # the job's names: {"task": ...}, {"entry": ..., "seed": ...}, {"study": ...} or {}
Value = Callable[[Plan, Job], Any]
Params = Callable[[Plan, Job], dict[str, list[str] | None]]  # DVC's params: file -> keys (None: every key)

PROGRAMS_DIR = "data/programs/{entry}"  # a program entry's fetched checkout (program.source)
EXPORT_DIR = "results/submissions"  # our runs as DAWNBench v1 submissions
DAWNBENCH_DIR = "data/dawnbench/entries"  # the public DAWNBench entries, unpacked


def shows(*templates: str) -> Callable[[Value], Value]:
    """The path templates a function of the table gives (for docs/pipeline.md and its DAG)."""

    def mark(value: Value) -> Value:
        value.shows = templates
        return value

    return mark


def _entry(plan: Plan, job: Job):
    return plan.entries[job["entry"]]


def _is_program(plan: Plan, job: Job) -> bool:
    return "program" in _entry(plan, job).recipe


def words(*pairs: tuple[str, Any]) -> list[str]:
    """``--flag value`` for each pair whose value is set (``--flag`` alone for True)."""
    out: list[str] = []
    for flag, value in pairs:
        if value is None or value is False:
            continue
        out += [flag] if value is True else [flag, str(value)]
    return out


def config(*keys: str) -> Value:
    """The configuration's value at ``keys`` (the same for every job)."""

    def value(plan: Plan, job: Job) -> Any:
        found = plan.config
        for key in keys:
            found = found[key]
        return found

    value.__doc__ = f"config `{'.'.join(keys)}`"
    return value


def config_words(*keys: str) -> Value:
    """The configuration's value at ``keys`` as a word, or a list of words."""
    read = config(*keys)

    def value(plan: Plan, job: Job) -> str | list[str]:
        found = read(plan, job)
        return [str(v) for v in found] if isinstance(found, list | tuple) else str(found)

    value.__doc__ = read.__doc__
    return value


# ------------------------------------------------------------------ inputs
@shows("data/prepared/{task}")
def prepared(plan: Plan, job: Job) -> str:
    """The prepared data of the job's task (its entry's)."""
    return f"data/prepared/{plan.task_of(job['entry'])}"


@shows("config `data_checksums.{task}`")
def checksums(plan: Plan, job: Job) -> list[str]:
    """The task's checksum file, where the config names one (an edit fetches again)."""
    path = plan.config["data_checksums"].get(job["task"])
    return [path] if path else []


SCRIPT_SUFFIXES = (".py", ".sh", ".jl", ".R", ".lua", ".pl", ".rb")


@shows(PROGRAMS_DIR, "the files a program entry's command names, and its `program.files`")
def program_inputs(plan: Plan, job: Job) -> list[str]:
    """What a program entry's runs are made from, beside its entry's values: its
    fetched checkout, or the files its command names (a word with a '/' or a
    script's suffix, no placeholder) and its program.files, relative to its
    workdir (absolute where the program is kept outside the project); a change reruns its runs, and a missing one is named
    before anything runs. Nothing for a zoo entry. Written from the entry
    alone, not from what exists, so dvc.yaml is the same on every machine."""
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


@shows(f"{RUN_DIR}/model.pt", "data/prepared/{task}")
def program_run_inputs(plan: Plan, job: Job) -> list[str]:
    """A program run's model.pt and its task's prepared data (the items it was given); nothing for a zoo entry."""
    if not _is_program(plan, job):
        return []
    return [RUN_DIR.format(entry=job["entry"], seed=job["seed"]) + "/model.pt", prepared(plan, job)]


def each_seed(name: str) -> Value:
    """File ``name`` of every run of the job's entry."""

    @shows(f"{RUN_DIR}/{name}")
    def files(plan: Plan, job: Job) -> list[str]:
        return plan.seed_files(job["entry"], name)

    files.__doc__ = f"`{name}` of every seed of the entry"
    return files


def runs_dir(plan: Plan, job: Job) -> str:
    """DVC: the entry's runs directory (one entry's number of seeds may differ from another's)."""
    return f"results/runs/{job['entry']}"


def all_runs(name: str) -> Value:
    """File (or directory) ``name`` of every run of the configuration."""

    @shows(f"{RUN_DIR}/{name}")
    def files(plan: Plan, job: Job) -> list[str]:
        return plan.run_files(name)

    files.__doc__ = f"`{name}` of every run"
    return files


def study_runs(name: str) -> Value:
    """File ``name`` of every run the job's study reads."""

    @shows(f"{RUN_DIR}/{name}")
    def files(plan: Plan, job: Job) -> list[str]:
        return [f"{d}/{name}" for d in plan.study_runs(job["study"])]

    files.__doc__ = f"`{name}` of every run of the study (its base's and each variant's)"
    return files


@shows("results/stability/{entry}.json")
def stability_files(plan: Plan, job: Job) -> list[str]:
    """Every entry's stability over seeds."""
    return [f"results/stability/{e}.json" for e in plan.entries]


@shows("results/studies/{study}.json")
def study_files(plan: Plan, job: Job) -> list[str]:
    """Every study's summary (the page links them)."""
    return [f"results/studies/{s}.json" for s in plan.studies]


def dawnbench_wanted(plan: Plan) -> bool:
    """The configuration fetches the public DAWNBench entries (config `dawnbench_entries.source`)."""
    return bool(plan.config["dawnbench_entries"]["source"])


@shows("config `dawnbench_entries.source`, when a local file")
def dawnbench_archive(plan: Plan, job: Job) -> list[str]:
    """A local archive is an input (a new copy refetches); a URL is not a file."""
    from dawnpipe.data.files import is_url

    source = plan.config["dawnbench_entries"]["source"]
    return [source] if source and not is_url(source) else []


def submission_dir_names(plan: Plan) -> list[str]:
    """The config's submission_dirs, and the public DAWNBench entries where the config fetches them."""
    return [*plan.config["submission_dirs"], *([DAWNBENCH_DIR] if dawnbench_wanted(plan) else [])]


def _dir_files(dirs: list[str]) -> list[str]:
    """Directories as inputs: our export and the DAWNBench entries as the
    directories their stages make; another directory as the files in it, so
    that a changed or added submission reruns the report (a directory's own
    time stamp would not)."""
    inputs = []
    for d in dirs:
        if os.path.normpath(d) in (EXPORT_DIR, DAWNBENCH_DIR) or not os.path.isdir(d):
            inputs.append(d)  # made by a stage, or reported missing
            continue
        for root, subdirs, files in os.walk(d):
            subdirs[:] = sorted(x for x in subdirs if not x.startswith("."))
            inputs += [os.path.join(root, f) for f in sorted(files) if not f.startswith(".")]
    return inputs


@shows(EXPORT_DIR, DAWNBENCH_DIR, "every file of the config's other `submission_dirs`")
def submission_files(plan: Plan, job: Job) -> list[str]:
    """The submissions the report audits and ranks (config `submission_dirs`, the public DAWNBench entries)."""
    return _dir_files(submission_dir_names(plan))


def submission_dirs(plan: Plan, job: Job) -> list[str]:
    """DVC: the submission directories themselves (DVC compares a directory by content)."""
    return submission_dir_names(plan)


@shows("every file of the config's `mlperf_dirs`")
def mlperf_files(plan: Plan, job: Job) -> list[str]:
    """The MLPerf Training results the report scores (config `mlperf_dirs`)."""
    return _dir_files(plan.config["mlperf_dirs"])


def mlperf_dirs(plan: Plan, job: Job) -> list[str]:
    """DVC: the MLPerf result directories themselves."""
    return list(plan.config["mlperf_dirs"])


@shows("config `audit_rules`")
def audit_rules(plan: Plan, job: Job) -> list[str]:
    """The audit's rule files (config `audit_rules`)."""
    return list(plan.config["audit_rules"])


# ------------------------------------------------------------------ command words
def fetch_source(plan: Plan, job: Job) -> list[str]:
    """`--source` where the config names the task's data source (config `data_sources`)."""
    return words(("--source", plan.config["data_sources"].get(job["task"])))


def fetch_checksums(plan: Plan, job: Job) -> list[str]:
    """`--expect FILE` for the task's checksum file (config `data_checksums`)."""
    return [w for p in checksums(plan, job) for w in ("--expect", p)]


def fetch_new_test(plan: Plan, job: Job) -> list[str]:
    """`--new-test` where an entry asks for the task's new test set, and `--new-test-source` where the config says."""
    if not plan.wants_new_test(job["task"]):
        return []
    return ["--new-test", *words(("--new-test-source", plan.config["new_test_sources"].get(job["task"])))]


def entry_file(plan: Plan, job: Job) -> str:
    """The entry's file (a study variant's: `<study file>#<variant>`)."""
    return _entry(plan, job).file


def variant_entries_dir(plan: Plan, job: Job) -> str | None:
    """Where a study variant's base entry is (the config's entries_dir); None for an entry file."""
    return plan.config["entries_dir"] if _entry(plan, job).is_variant else None


def entries_dir_words(plan: Plan, job: Job) -> list[str]:
    """`--entries-dir` for a study variant (where its base entry is)."""
    return words(("--entries-dir", variant_entries_dir(plan, job)))


PROGRAM_RULE_FLAGS = (
    ("--startup-allowance", "startup_allowance_cpu_seconds"),
    ("--evaluation-factor", "evaluation_factor"),
    ("--held-back", "held_back_fraction"),
)


def train_settings(
    threshold: float | None = None,
    *,
    train_limit: int | None = None,
    test_limit: int | None = None,
    stop_at_threshold: bool = False,
    entries_dir: str | None = None,
    programs: dict[str, Any] | None = None,
) -> list[str]:
    """The words of a run's settings in the train stage's command (its
    ``settings``), for the pipeline and for any other caller of the stage."""
    return words(
        ("--threshold", None if threshold is None else repr(float(threshold))),
        ("--train-limit", train_limit),
        ("--test-limit", test_limit),
        ("--stop-at-threshold", stop_at_threshold),
        ("--entries-dir", entries_dir),
        *((flag, repr(programs[key])) for flag, key in PROGRAM_RULE_FLAGS if programs is not None),
    )


def run_settings_words(plan: Plan, job: Job) -> list[str]:
    """The run's threshold, limits, stop rule, a variant's entries dir and a program entry's clock rules (config `programs`)."""
    c = plan.config
    return train_settings(
        plan.threshold(plan.task_of(job["entry"])),
        train_limit=c["train_limit"],
        test_limit=c["test_limit"],
        stop_at_threshold=plan.stop_at_threshold(job["entry"]),
        entries_dir=variant_entries_dir(plan, job),
        programs=plan.run_settings(job["entry"], 0)["programs"] if _is_program(plan, job) else None,
    )


def telemetry_interval(plan: Plan, job: Job) -> str:
    """Seconds between hardware samples (config `telemetry.interval_s`); a new interval samples, so runs, again."""
    return repr(float(plan.config["telemetry"]["interval_s"]))


def cpu_peak_probe(plan: Plan, job: Job) -> str:
    """Seconds of each measurement of a CPU run's peak probe (config `telemetry.cpu_peak_probe_s`); a new length probes, so runs, again."""
    return repr(float(plan.config["telemetry"]["cpu_peak_probe_s"]))


def limit_words(plan: Plan, job: Job) -> list[str]:
    """`--limit` where the config limits the test items (config `test_limit`)."""
    return words(("--limit", plan.config["test_limit"]))


def program_model_words(plan: Plan, job: Job) -> list[str]:
    """A program run's `--model` and `--data` (its FLOPs are counted from its model's graph); nothing for a zoo entry."""
    model_pt, data = program_run_inputs(plan, job) or (None, None)
    return words(("--model", model_pt), ("--data", data))


def ladder(plan: Plan, job: Job) -> list[str]:
    """`--ladder` with the task's thresholds, where the config gives them (config `sensitivity_ladders`)."""
    rungs = plan.config["sensitivity_ladders"].get(plan.task_of(job["entry"]))
    return ["--ladder", *map(repr, map(float, rungs))] if rungs else []


def program_source(key: str) -> Value:
    """The program entry's ``program.source.<key>``."""

    def value(plan: Plan, job: Job) -> str:
        return _entry(plan, job).recipe["program"]["source"][key]

    value.__doc__ = f"the entry's `program.source.{key}`"
    return value


def dawnbench_source(plan: Plan, job: Job) -> list[str]:
    """`--source` and `--sha256` of the public entries' archive (config `dawnbench_entries`)."""
    source = plan.config["dawnbench_entries"]
    return words(("--source", source["source"]), ("--sha256", source["sha256"]))


def run_dirs(plan: Plan, job: Job) -> list[str]:
    """Every run directory of the configuration."""
    return [plan.run_dir(e, s) for e, s in plan.runs()]


def submission_dir_words(plan: Plan, job: Job) -> list[str]:
    """`--submissions` with the config's submission_dirs and, where fetched, the public DAWNBench entries."""
    return ["--submissions", *submission_dir_names(plan)]


def mlperf_words(plan: Plan, job: Job) -> list[str]:
    """`--mlperf` with the config's mlperf_dirs, and its `--mlperf-ruleset`."""
    return ["--mlperf", *plan.config["mlperf_dirs"], "--mlperf-ruleset", plan.config["mlperf_ruleset"]]


def rules_words(plan: Plan, job: Job) -> list[str]:
    """`--rules FILE` for each of the config's audit_rules."""
    return [w for p in plan.config["audit_rules"] for w in ("--rules", p)]


def studies_words(plan: Plan, job: Job) -> list[str]:
    """`--studies` with every study's summary, where the config has studies."""
    return ["--studies", *study_files(plan, job)] if plan.studies else []


def study_file(plan: Plan, job: Job) -> str:
    """The study's file (config `studies_dir`)."""
    return plan.studies[job["study"]].file


def same_as_words(plan: Plan, job: Job) -> list[str]:
    """`--same-as VARIANT ENTRY` for each variant whose recipe runs as another study's or the config's entry (its runs are there)."""
    return [w for vid, e in plan.shared_runs(job["study"]).items() for w in ("--same-as", vid, e)]


def study_seeds_words(plan: Plan, job: Job) -> list[str]:
    """`--seeds` with the config's study_seeds, in place of the study file's."""
    seeds = plan.config["study_seeds"]
    return ["--seeds", *map(str, seeds)] if seeds is not None else []


# ------------------------------------------------------------------ rerun on values
# A by-value rerun trigger: (Snakemake's value: one hash in the rule's params,
# DVC's params: the files and keys dvc.yaml lists), so a comment edit reruns
# nothing and a changed value reruns what uses it.
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
    """What a FLOP count reads of the entry (hash): its network, input, batch, precision and memory format."""
    return plan.values_hash(plan.flops_values(job["entry"]))


def flops_params(plan: Plan, job: Job) -> dict[str, list[str] | None]:
    """DVC: the entry file's keys a FLOP count reads (plan.FLOPS_KEYS, FLOPS_HYPERPARAMETERS)."""
    from dawnpipe.pipeline.plan import FLOPS_HYPERPARAMETERS, FLOPS_KEYS

    # the same keys for every item (DVC's foreach body lists the first item's); a variant's resolved recipe has them all.
    # A program entry's file has none of them: with one in the configuration, every entry's whole file
    # (a zoo entry's new lr then recounts its FLOPs under DVC: seconds, and never a wrong count).
    if any("program" in e.recipe for e in plan.entries.values()):
        return {_entry(plan, job).params_file: None}
    return {_entry(plan, job).params_file: [*FLOPS_KEYS, *(f"hyperparameters.{k}" for k in FLOPS_HYPERPARAMETERS)]}


def prices_value(plan: Plan, job: Job) -> str:
    """The price table's values (hash), not its bytes: a comment edit reruns nothing."""
    return plan.values_hash(plan.prices_values())


def prices_params(plan: Plan, job: Job) -> dict[str, list[str] | None]:
    """DVC: every value of the price table (config `prices`)."""
    return {plan.config["prices"]: None}


def study_value(plan: Plan, job: Job) -> str:
    """The study file's values (hash): a new ladder or description summarizes again, a comment does not."""
    return plan.values_hash(plan.studies[job["study"]].doc)


def study_params(plan: Plan, job: Job) -> dict[str, list[str] | None]:
    """DVC: every value of the study file."""
    return {plan.studies[job["study"]].file: None}


RECIPE = (run_settings_value, entry_params)  # the train stage's: its entry's values and its settings
RUN_SETTINGS = (run_settings_value, no_params)  # the later stages of a run
FLOP_INPUTS = (flops_value, flops_params)  # what a FLOP count reads of an entry
PRICES = (prices_value, prices_params)
STUDY_FILE = (study_value, study_params)


# ------------------------------------------------------------------ environments, threads, code, which jobs
def train_env(plan: Plan, job: Job) -> str:
    """train-torch or train-tf by the entry's framework; a program entry's `program.conda_env`."""
    recipe = _entry(plan, job).recipe
    if "program" in recipe:  # somebody's program: the environment its entry names
        return recipe["program"]["conda_env"]
    return "train-tf" if recipe["framework"] == "tensorflow" else "train-torch"


def model_reader_env(plan: Plan, job: Job) -> str:
    """report; a program run's training environment (onnx or TensorFlow reads its model)."""
    return train_env(plan, job) if _is_program(plan, job) else "report"


def prepare_threads(plan: Plan, job: Job, cores: int) -> int:
    """A task whose data decodes in parallel (ImageNet) gets every core it may use; the others one."""
    return max(1, cores) if plan.task(job["task"]).data_kind.parallel_prepare else 1


def data_modules(plan: Plan) -> list[str]:
    """The data modules of the configuration's tasks (picked by name from their task files, at run time)."""
    return sorted({plan.task(t).data["module"] for t in plan.tasks()})


def trainer_modules(plan: Plan) -> list[str]:
    """Every trainer an entry may pick (by kind of items and framework, at run time)."""
    from dawnpipe.train import TRAINERS

    return sorted(TRAINERS.values())


def backend_modules(plan: Plan) -> list[str]:
    """The modules of the configuration's inference backends (config `inference.backends`)."""
    from dawnpipe.infer.backends import BACKENDS

    return sorted({b.module for b in BACKENDS if b.name in plan.config["inference"]["backends"]})


def wants_program_source(plan: Plan) -> bool:
    """An entry of the configuration names a `program.source`."""
    return any(e.recipe.get("program", {}).get("source") for e in plan.entries.values())


def has_program_source(plan: Plan, job: Job) -> bool:
    """The entry names a `program.source`."""
    return bool(_entry(plan, job).recipe.get("program", {}).get("source"))
