"""A study's results as a record: what the pipeline's study stage wrote
(results/studies/<name>.json), with the machine and commit of every run it
rests on, so that docs/studies.md's tables are generated, never typed.

    snakemake --cores all results/studies/lesion-fastnet.html --configfile config/studies-fastnet.yaml
    python bench/studies.py lesion-fastnet --record      # -> docs/measurements/study-lesion-fastnet.json
    python bench/studies.py --all --record               # every results/studies/*.json
    python bench/studies.py lesion-fastnet --run --record   # run it first: the record's quiet check covers its training

Without --record it prints what it would record, one line per variant. The
record keeps the study's claim, design, seeds and ladder, and per variant
every figure of the study JSON (median time to each rung, speed-up, seeds
reaching, epochs, final and held-out accuracy, items/s, seconds per epoch)
and the study's checks with their verdicts; per run, every per-seed value a
check reads (time and epochs to each rung, seconds per epoch, final and
held-out accuracy) and the facts of its run.json (results/runs/<entry>/seed<k>/run.json):
git commit and whether the tree was dirty, CPU, platform, Python and
framework versions, threads, start and end. The commits and machines of all
the runs are summarised, so a study whose runs span several commits or
machines says so. `made_by` is the Snakemake command that runs the study: the
configuration (config/*.yaml) whose `studies` list names it, or --configfile.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench")]

from record import add_record_flag, write_record  # noqa: E402

from dawnpipe.errors import DawnpipeError  # noqa: E402

RUN_FACTS = ("started", "finished", "world_size", "threads_per_process")
ENVIRONMENT_FACTS = ("cpu_model", "cpu_count", "platform", "python", "framework", "framework_version", "device")


def study_configs(name: str, root: Path = ROOT) -> list[str]:
    """The configurations of config/ whose ``studies`` list names study ``name``."""
    import yaml

    found = []
    for path in sorted((root / "config").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text()) or {}
        if name in (doc.get("studies") or []):
            found.append(str(path.relative_to(root)))
    return found


def made_by(name: str, configfile: str | None = None, root: Path = ROOT) -> str | None:
    """The Snakemake command that runs study ``name`` (None when no single configuration names it)."""
    configs = [configfile] if configfile else study_configs(name, root)
    if len(configs) != 1:
        return None
    return shlex.join(["snakemake", "--cores", "all", f"results/studies/{name}.html", "--configfile", configs[0]])


def run_facts(run_json: Path) -> dict[str, Any]:
    """What a run's run.json says of where and when it ran (an absent file: only that)."""
    from dawnpipe.runfiles import read_run_file

    if not run_json.is_file():
        return {"run_json": None}
    run = read_run_file(run_json, "run_complete")
    env = run.get("environment", {})
    git = env.get("git") or {}
    return {
        "commit": git.get("commit"),
        "dirty": git.get("dirty"),
        **{k: run.get(k) for k in RUN_FACTS},
        **{k: env.get(k) for k in ENVIRONMENT_FACTS},
        "threads": env.get("threads"),
    }


def summarise_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The commits, machines and time span of a study's runs."""
    commits: dict[tuple, int] = {}
    machines: dict[tuple, int] = {}
    for r in runs:
        commits[(r.get("commit"), r.get("dirty"))] = commits.get((r.get("commit"), r.get("dirty")), 0) + 1
        key = tuple(r.get(k) for k in ENVIRONMENT_FACTS)
        machines[key] = machines.get(key, 0) + 1
    started = [r["started"] for r in runs if r.get("started")]
    finished = [r["finished"] for r in runs if r.get("finished")]
    return {
        "commits": [{"commit": c, "dirty": d, "runs": n} for (c, d), n in commits.items()],
        "machines": [{**dict(zip(ENVIRONMENT_FACTS, key, strict=True)), "runs": n} for key, n in machines.items()],
        "first_started": min(started) if started else None,
        "last_finished": max(finished) if finished else None,
        "runs_without_run_json": sum(1 for r in runs if r.get("run_json", True) is None),
    }


def study_record(name: str, results: Path, configfile: str | None = None) -> dict[str, Any]:
    """The record of study ``name`` from ``results``/studies/<name>.json and its runs' run.json files."""
    path = results / "studies" / f"{name}.json"
    if not path.is_file():
        raise DawnpipeError(
            f"{path}: no such study result; run the study first ({made_by(name, configfile) or 'snakemake ... results/studies/' + name + '.html'})"
        )
    summary = json.loads(path.read_text())
    all_runs = []
    variants = []
    for v in summary["variants"]:
        ran_as = v.get("same_as") or v["id"]
        runs = []
        for r in v["runs"]:
            facts = run_facts(results / "runs" / ran_as / f"seed{r['seed']}" / "run.json")
            runs.append({**r, "ran_as": ran_as, **facts})
            all_runs.append(facts)
        variants.append({**v, "runs": runs})
    keep = (
        "study",
        "description",
        "claim",
        "base",
        "design",
        "figure",
        "seeds",
        "study_file_seeds",
        "ladder",
        "continue_past_threshold",
        "metric",
        "generated",
        "checks",  # the claim as checks, as the study file stated them when it ran
        "verdicts",  # their verdicts, by the rule of dawnpipe.verdict (scripts/docs.py computes them again from the runs)
    )
    return {
        **{k: summary.get(k) for k in keep},
        "source": f"results/studies/{name}.json",
        "made_by": made_by(name, configfile),
        "runs": summarise_runs(all_runs),
        "variants": variants,
    }


def run_study(name: str, configfile: str | None = None) -> None:
    """Run study ``name`` with the Snakemake command made_by names, from the repository's root (its output on ours)."""
    import subprocess

    command = made_by(name, configfile)
    if command is None:
        raise DawnpipeError(f"study {name}: no single configuration of config/ names it; give --configfile")
    print(f"studies: {command}", flush=True)
    words = shlex.split(command)
    beside = Path(sys.executable).parent / words[0]  # the snakemake of this interpreter's environment
    done = subprocess.run([str(beside) if beside.is_file() else words[0], *words[1:]], cwd=ROOT)
    if done.returncode != 0:
        raise DawnpipeError(f"study {name}: {command} failed (exit {done.returncode}); its output is above")


def describe(record: dict[str, Any]) -> list[str]:
    """One line per variant: what the record holds, for the terminal."""
    top = str(record["ladder"][-1])
    lines = [f"study {record['study']}: claim: {record['claim']}"]
    for v in record["variants"]:
        median = v["median_time_to_accuracy_hours"][top]
        shown = f"{median * 3600:.1f} s" if median is not None else "did not reach"
        speedup = f"{v['speedup'][top]:.2f}x" if v["speedup"][top] is not None else "-"
        lines.append(f"  {v['id']}: median to {top}: {shown}, speed-up {speedup}, reached {v['reached_fraction'][top]:.0%}")
    from dawnpipe.studies.checks import line

    lines += [f"  {line(result)}" for result in record.get("verdicts") or ()]
    commits = ", ".join(f"{(c['commit'] or 'unknown')[:7]}{' (dirty)' if c['dirty'] else ''} x{c['runs']}" for c in record["runs"]["commits"])
    lines.append(f"  runs at commits: {commits}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("studies", nargs="*", help="study names (results/studies/<name>.json)")
    p.add_argument("--all", action="store_true", help="every study under RESULTS/studies")
    p.add_argument("--results", type=Path, default=ROOT / "results", help="the pipeline's results directory (default results)")
    p.add_argument("--configfile", help="the configuration the studies ran under (default: the config/*.yaml whose `studies` names each)")
    p.add_argument(
        "--run",
        action="store_true",
        help="run each study's Snakemake command first (what made_by names), so that the record's quiet check covers its training",
    )
    add_record_flag(p, "study-<name>")
    args = p.parse_args(argv)
    argv = [__file__, *(sys.argv[1:] if argv is None else argv)]
    names = list(args.studies)
    if args.all:
        names += sorted(q.stem for q in (args.results / "studies").glob("*.json") if q.stem not in names)
    if not names:
        p.error("name a study, or --all")
    for name in names:
        if args.run:
            run_study(name, args.configfile)
        record = study_record(name, args.results, args.configfile)
        print("\n".join(describe(record)), flush=True)
        if args.record:
            # one record per study, its command naming that study alone
            one = [argv[0], name, *(a for a in argv[1:] if a not in args.studies and a != "--all")]
            write_record(f"study-{name}", record, out_dir=args.record_dir, argv=one)
    return 0


if __name__ == "__main__":
    from dawnpipe.cli import run_command

    sys.exit(run_command("studies", lambda _: main(), None, prog="bench/studies"))
