"""Score MLPerf Training results: every (system, benchmark) folder's runs,
their compliance, the official score and the convergence (RCP) check.

The rules, from MLCommons' result summarizer and package checker
(mlperf-logging, pinned in requirements.txt): a run's time is run_stop
minus run_start, in minutes; a run the compliance checker rejects (or whose
log does not parse) is dropped and counts as the slowest; the score is the
mean of the runs left after dropping the fastest and slowest (four each way
for unet3d, one otherwise), none when more runs failed than that; a
``scaling.json`` beside the runs multiplies it. The olympic mean
(dawnpipe.olympic) is the one number computed by dawnpipe rather than by the
package, which keeps it inside its summarizer; tests/test_mlperf.py checks
it against the summarizer itself.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dawnpipe.errors import DawnpipeError, UsageError
from dawnpipe.mlperf import official
from dawnpipe.olympic import max_dropped, olympic_mean

DEFAULT_RULESET = "4.0.0"
MAX_LOG_BYTES = 32 << 20  # the largest real v4.0 log is ~0.2 MB; a 100 MB "log" is refused, not parsed


@dataclass
class Run:
    file: str
    minutes: float | None
    status: str | None
    compliant: bool
    converged: bool
    messages: list[str] = field(default_factory=list)
    read: bool = True  # False: not given to the package (over the size cap, not a regular file, a line its parser cannot take)


@dataclass
class Result:
    submitter: str
    system: str
    benchmark: str
    ruleset: str
    folder: str
    system_name: str | None = None
    division: str | None = None
    accelerator: str | None = None
    accelerators_count: int | None = None
    framework: str | None = None
    score_minutes: float | None = None
    reason: str = ""
    scaling_factor: float = 1.0
    runs_required: int | None = None
    runs: list[Run] = field(default_factory=list)
    rcp: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        return "error" if self.errors else "warning" if self.warnings else "ok"

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status
        return d


def result_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("result_*.txt"), key=lambda p: (len(p.name), p.name))


def benchmark_folders(path: Path) -> list[tuple[Path, Path, Path]]:
    """(submitter folder, system folder, benchmark folder) under ``path``: a
    folder of submitters, a submitter folder, its results folder, a system
    folder or one benchmark folder."""
    path = Path(path)
    if not path.is_dir():
        raise UsageError(f"{path}: not a directory (give a submitter folder, its results/ folder, a system folder or a benchmark folder)")
    if result_files(path):
        system = path.parent
        return [(system.parent.parent, system, path)]
    submitters = sorted(p for p in path.iterdir() if (p / "results").is_dir())
    if submitters and not (path / "results").is_dir():  # a folder of submitter folders (a results repository)
        return [found for submitter in submitters for found in benchmark_folders(submitter)]
    if (path / "results").is_dir():
        path = path / "results"
    found = []
    for level in (path, *sorted(p for p in path.iterdir() if p.is_dir())):
        for bench in sorted(p for p in level.iterdir() if p.is_dir()) if level.is_dir() else []:
            if result_files(bench):
                found.append((bench.parent.parent.parent, bench.parent, bench))
    if not found:
        raise UsageError(f"{path}: no MLPerf results under it (expected <submitter>/results/<system>/<benchmark>/result_*.txt)")
    return found


def read_system(submitter_dir: Path, system: str, result: Result) -> None:
    from dawnpipe.fileio import read_json

    path = submitter_dir / "systems" / f"{system}.json"
    try:
        desc = read_json(path, max_bytes=1 << 20)
    except FileNotFoundError:
        result.errors.append(f"{path}: no system description (the summarizer skips a system without one)")
        return
    except DawnpipeError as e:
        result.errors.append(str(e))
        return
    if not isinstance(desc, dict):
        result.errors.append(f"{path}: a system description is a JSON object, not {type(desc).__name__}")
        return
    for key in ("division", "submitter", "system_name", "accelerator_model_name", "accelerators_per_node", "number_of_nodes", "framework"):
        if key not in desc:
            result.errors.append(f"{path}: field '{key}' missing")
    if result.errors:
        return
    result.division = str(desc["division"])
    result.submitter = str(desc["submitter"])
    result.__dict__.update({k: str(v) for k, v in official.system_columns(desc).items()})
    try:
        result.accelerators_count = int(desc["accelerators_per_node"]) * int(desc["number_of_nodes"])
    except (TypeError, ValueError):
        result.errors.append(f"{path}: fields 'accelerators_per_node' and 'number_of_nodes' must be whole numbers")


def read_scaling(folder: Path, result: Result) -> float | None:
    """scaling.json's factor (1.0 without one, as the summarizer reads it); None when it cannot be read."""
    from dawnpipe.fileio import read_json

    path = folder / "scaling.json"
    if not path.exists():
        if path.is_symlink():  # the summarizer's os.path.exists is False for it too: no factor, but say so
            result.warnings.append(
                f"{path}: a symbolic link to nothing ({os.readlink(path)!r}); read as absent (factor 1.0), as the result summarizer reads it"
            )
        return 1.0
    try:
        factor = read_json(path, max_bytes=1 << 16)
    except DawnpipeError as e:
        result.errors.append(str(e))
        return None
    factor = factor.get("scaling_factor") if isinstance(factor, dict) else None
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not math.isfinite(factor) or factor <= 0:
        result.errors.append(f"{path}: field 'scaling_factor' must be a positive number")
        return None
    return float(factor)


def rcp_bypass(system_dir: Path, folder: Path, result: Result) -> bool:
    """package_checker_params asking for 'rcp-bypass', read as the package checker reads it:
    a line equal to it, so only a last line without a newline counts."""
    bypass = False
    for params in (system_dir / "package_checker_params", folder / "package_checker_params"):
        if params.is_file():
            from dawnpipe.fileio import read_capped_bytes

            lines = read_capped_bytes(params, 1 << 16).decode("latin-1").splitlines(keepends=True)
            bypass |= "rcp-bypass" in lines
            if "rcp-bypass" not in lines and any(line.strip() == "rcp-bypass" for line in lines):
                result.warnings.append(f"{params}: 'rcp-bypass' followed by a newline is not read by mlperf-logging's package checker")
    return bypass


def check_runs(files: list[Path], ruleset: str, max_bytes: int) -> list[Run]:
    runs = []
    for path in files:
        try:
            size = path.stat().st_size  # through a symbolic link, as reading would
        except OSError as e:  # a dangling link, a file removed meanwhile
            runs.append(Run(path.name, None, None, False, False, [f"cannot be read: {e.strerror or e}"], read=False))
            continue
        if not path.is_file() or size > max_bytes:
            why = "not a regular file" if not path.is_file() else f"{size:,} bytes, over the {max_bytes:,}-byte cap (--max-bytes); not read"
            runs.append(Run(path.name, None, None, False, False, [why], read=False))
            continue
        checked = official.check_run(path, ruleset)
        target_failed = any(m.startswith(("Failed checks for eval", "Failed checks for train")) for m in checked.messages)
        converged = checked.status == "success" and not target_failed
        runs.append(Run(path.name, checked.minutes, checked.status, checked.valid, converged, checked.messages, read=not checked.screened))
    return runs


def rcp_summary(result: Result, folder: Path, files: list[Path], runs: list[Run], bypass: bool, scaling: float | None) -> None:
    """The convergence check's verdict, figures and the scaling.json it implies."""
    if result.division != "closed":
        result.rcp = {"verdict": "not required", "message": f"the {result.division or 'unknown'} division has no convergence check"}
        return
    if not all(r.read for r in runs):
        unread = ", ".join(r.file for r in runs if not r.read)
        result.rcp = {
            "verdict": "not checked",
            "message": f"not given to mlperf-logging: {unread} (over the size cap, not a regular file, or a line its parser cannot take)",
        }
        result.errors.append(f"convergence (RCP) check not run: {unread} not given to mlperf-logging")
        return
    try:
        check = official.check_rcp(folder, files, result.ruleset, bypass)
    except official.RcpUnreadable as e:  # one log it cannot read, named
        result.rcp = {"verdict": "error", "message": str(e)}
        result.errors.append(f"convergence (RCP) check failed: {e}")
        return
    except Exception as e:  # the package's checker failing on this folder's logs
        result.rcp = {"verdict": "error", "message": f"{type(e).__name__}: {e}"}
        result.errors.append(f"convergence (RCP) check failed on these logs: {type(e).__name__}: {e}")
        return
    converged = [v for v in check.epochs.values() if math.isfinite(v)]
    failed = len(check.epochs) - len(converged)
    mean = olympic_mean(converged, failed, result.benchmark)
    msg = check.message
    if msg.endswith("passed using rcp_bypass"):
        verdict = "bypassed"
    elif check.passed:
        verdict = "pass"
    elif msg.startswith("Missing RCP") or msg == "Cannot find any RCPs":
        verdict = "no reference"
    else:
        verdict = "fail"
    ref = check.reference or {}
    # What the check would write as scaling.json: its factor when it passed with a mean faster than the reference's, else no file.
    implied = check.norm_factor if (verdict == "pass" and mean is not None and ref and mean < ref["mean"]) else 1.0
    result.rcp = {
        "verdict": verdict,
        "message": msg,
        "batch_size": check.batch_size,
        "epochs": {k: (v if math.isfinite(v) else None) for k, v in check.epochs.items()},
        "mean": mean,
        "reference_mean": ref.get("mean"),
        "min_allowed": ref.get("min_allowed"),
        "reference": ref.get("kind"),
        "normalization_factor": implied,
        "scaling_json": scaling if (folder / "scaling.json").exists() else None,
    }
    if verdict in ("fail", "no reference"):
        result.errors.append(f"convergence (RCP) check: {verdict}: {msg}")
    elif verdict == "bypassed":
        result.warnings.append(f"convergence (RCP) check failed and was bypassed by package_checker_params: {msg}")
    if scaling is not None and not math.isclose(scaling, implied, rel_tol=1e-9):
        have = f"scaling.json says {scaling!r}" if (folder / "scaling.json").exists() else "there is no scaling.json"
        result.errors.append(f"{have}, but the convergence check implies a factor of {implied!r}")


def score_folder(submitter_dir: Path, system_dir: Path, folder: Path, ruleset: str, max_bytes: int = MAX_LOG_BYTES) -> Result:
    benchmark = official.benchmark_alias(folder.name)
    result = Result(submitter=submitter_dir.name, system=system_dir.name, benchmark=benchmark, ruleset=ruleset, folder=str(folder))
    read_system(submitter_dir, system_dir.name, result)
    if benchmark not in official.allowed_benchmarks(ruleset):
        result.errors.append(f"{folder}: '{benchmark}' is not a benchmark of MLPerf Training {ruleset}")
        result.reason = "not a benchmark of this ruleset"
        return result
    files = result_files(folder)
    result.runs_required = official.required_runs(benchmark)
    result.runs = check_runs(files, ruleset, max_bytes)
    if result.runs_required and len(files) < result.runs_required:
        result.errors.append(f"{len(files)} runs; the rules require {result.runs_required}")
    for run in result.runs:
        if not run.compliant:
            result.warnings.append(f"{run.file}: dropped (counts as the slowest run): {run.messages[0] if run.messages else 'failed the compliance check'}")
    scaling = read_scaling(folder, result)
    result.scaling_factor = scaling if scaling is not None else 1.0
    failed = sum(not r.compliant for r in result.runs)
    drop = max_dropped(benchmark)
    if failed > drop:
        result.reason = f"{failed} of {len(result.runs)} runs failed the compliance check; at most {drop} may be dropped"
    elif any(r.compliant and r.minutes is None for r in result.runs):  # the checker requires run_start/run_stop, so not seen in practice
        result.reason = "a compliant run without run_start/run_stop"
    elif scaling is None:
        result.reason = "scaling.json cannot be read"
    else:
        mean = olympic_mean([r.minutes for r in result.runs if r.compliant], failed, benchmark)
        if mean is None:
            result.reason = f"no run left after dropping {drop} at each end ({len(result.runs)} runs)"
        else:
            result.score_minutes = mean * scaling
    if result.score_minutes is None:
        result.errors.append(f"no score: {result.reason}")
    rcp_summary(result, folder, files, result.runs, rcp_bypass(system_dir, folder, result), scaling)
    return result


def score_paths(paths: list[str | os.PathLike], ruleset: str = DEFAULT_RULESET, max_bytes: int = MAX_LOG_BYTES) -> list[Result]:
    if ruleset not in official.rulesets():
        raise UsageError(f"--ruleset {ruleset!r}: mlperf-logging knows the Training rulesets {', '.join(official.rulesets())}")
    seen, results = set(), []
    for path in paths:
        for submitter_dir, system_dir, folder in benchmark_folders(Path(path)):
            key = folder.resolve()
            if key not in seen:
                seen.add(key)
                results.append(score_folder(submitter_dir, system_dir, folder, ruleset, max_bytes))
    return results
