"""The one place dawnpipe calls MLCommons' ``mlperf-logging`` package.

Its parser, compliance checker, RCP checker and the result summarizer's own
helpers do the work; this module only feeds them files that are safe to feed
them, keeps their prints and log records off the terminal, and hands their
verdicts back as data.

Why the screening: the compliance checker builds the path of its next rules
file from values in the log (``submission_division``, ``submission_benchmark``,
``opt_name``, ...) and runs the Python code in that rules file. A log that
names ``../../somewhere/evil`` would make it run a file the submission
brought. So every value the package's rules turn into a file name must be a
plain word (letters, digits, underscores) before a log reaches the checker,
and the keys that do so are read from the package's own rules files, not
listed here. The RCP checker likewise opens ``rcps_<benchmark>.json`` named by
the log: it is called only once the benchmark is one the ruleset knows.

The package's parser reports a line that is not JSON, but a line that is JSON
of another shape (a list, a record without ``key``, a ``key`` that is a list,
nesting deep enough to exhaust the recursion limit, a ``time_ms`` of 1e400)
makes it raise, and a ``time_ms`` of NaN or Infinity it hands on as a time.
Such a log is screened out first (``screen``), each line named by its number
in the file, and never given to the package.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

USAGE = "training"
WORD = re.compile(r"[A-Za-z0-9_]+")
TOKEN = ":::MLLOG "  # the package's (mlp_parser): a line holding it is an MLLOG record from there on
FIELDS = ("time_ms", "key", "value", "metadata")  # what the package's parser reads of every record
LISTED = 20  # problem lines of one log listed in full; the rest are counted


@contextlib.contextmanager
def captured():
    """Run package code with its prints and log records collected, not shown."""
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage().strip())

    root.handlers = [Collect()]
    root.setLevel(logging.INFO)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            yield records
    finally:
        root.handlers = saved_handlers
        root.setLevel(saved_level)


def rulesets() -> list[str]:
    from mlperf_logging.compliance_checker.mlp_compliance import rule_choices

    root = Path(__import__("mlperf_logging.compliance_checker", fromlist=["x"]).__file__).parent
    return sorted((r for r in rule_choices() if (root / f"{USAGE}_{r}").is_dir()), key=lambda r: tuple(int(x) for x in r.split(".")))


def allowed_benchmarks(ruleset: str) -> list[str]:
    from mlperf_logging.benchmark_meta import get_allowed_benchmarks

    return list(get_allowed_benchmarks(USAGE, ruleset))


def required_runs(benchmark: str) -> int | None:
    from mlperf_logging.benchmark_meta import get_result_file_counts

    return get_result_file_counts(USAGE).get(benchmark)


def benchmark_alias(folder_name: str) -> str:
    """The benchmark a result folder is of, as the result summarizer names it
    (``mask`` is maskrcnn). The package has no public name for this, nor for
    the system columns and the run's start and stop below: they are taken from
    the version requirements.txt pins, and tests/test_mlperf.py checks every
    private name this module uses, so an upgrade that changes one fails there."""
    from mlperf_logging.result_summarizer.result_summarizer import _benchmark_alias

    return _benchmark_alias(folder_name)


def system_columns(desc: dict) -> dict:
    """The system name, accelerator and framework as the result summarizer prints them."""
    from mlperf_logging.result_summarizer import result_summarizer as rs

    return {
        "system_name": rs._pretty_system_name(desc),
        "accelerator": rs._pretty_accelerator_model_name(desc),
        "framework": rs._pretty_framework(desc),
    }


@cache
def path_keys() -> frozenset[str]:
    """Log keys whose value the package's rules (any usage, any ruleset) turn
    into a rules file name: every KEY record mentioning enqueue_config. Read
    as text, record by record: some of the package's rules files are not
    valid YAML as a whole (the package only ever loads the ones it enqueues)."""
    root = Path(__import__("mlperf_logging.compliance_checker", fromlist=["x"]).__file__).parent
    keys = set()
    for rules in root.glob("*/*.yaml"):
        for record in re.split(r"^- *KEY:", rules.read_text(), flags=re.M)[1:]:
            name = re.search(r"^\s*NAME:\s*(\S+)", record, flags=re.M)
            if name and "enqueue_config" in record:
                keys.add(name.group(1))
    return frozenset(keys)


@dataclass
class CheckedRun:
    valid: bool  # what the result summarizer asks: compliant and parsed without errors
    messages: list[str] = field(default_factory=list)
    loglines: list = field(default_factory=list)
    status: str | None = None
    minutes: float | None = None
    screened: bool = False  # refused before the package saw it (screen): its checkers must not read it either


def parse(path: Path, ruleset: str):
    from mlperf_logging.compliance_checker.mlp_parser import parse_file

    with captured():
        return parse_file(str(path), ruleset=ruleset)


def mllog_lines(path: Path) -> list[tuple[int, str]]:
    """(number of the line in the file, the record as the package's parser sees
    it: from the last token on, stripped) for every line holding the MLLOG
    token, the file read as the package reads it (latin-1, universal newlines).
    The package cuts with ``re.sub(".*" + TOKEN, TOKEN, line)``: on a line of
    one newline at most, that is the line from its last token on, which
    ``rindex`` finds in linear time where the pattern takes quadratic time (a
    hostile line of 200 kB held the scorer for over 20 seconds)."""
    found = []
    with open(path, encoding="latin-1") as f:
        for number, line in enumerate(f, 1):
            if TOKEN in line:
                found.append((number, line[line.rindex(TOKEN) :].strip()))
    return found


def line_numbers(lines: list[tuple[int, str]], records: list[str]) -> list[int | None]:
    """The numbers in the file of ``records``, records the package's parser
    returns in the file's order (it numbers them only among MLLOG records)."""
    numbers, at = [], 0
    for record in records:
        while at < len(lines) and lines[at][1] != record:
            at += 1
        numbers.append(lines[at][0] if at < len(lines) else None)
        at += 1
    return numbers


def screen_record(record: str) -> str | None:
    """Why the package's parser must not be given this record (it would raise
    on it, or read a time that is not finite); None when it may have it,
    including records it rejects itself (not JSON, a time that is no number)."""
    if not record.startswith(TOKEN):
        return None
    try:
        doc = json.loads(record[len(TOKEN) :])
    except RecursionError:
        return "nested too deeply to read"
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return f"not a JSON object ({type(doc).__name__})"
    missing = [name for name in FIELDS if name not in doc]
    if missing:
        return f"no {missing[0]!r} field"
    if not isinstance(doc["key"], str):
        return "'key' is not a string"
    time_ms = doc["time_ms"]
    if isinstance(time_ms, bool) or not isinstance(time_ms, int | float | str):
        return "'time_ms' is not a number"
    try:
        finite = math.isfinite(float(time_ms))
    except OverflowError:
        finite = False
    except ValueError:
        return None
    return None if finite else "'time_ms' is not a finite number"


def screen(lines: list[tuple[int, str]]) -> list[str]:
    """Reasons (naming the lines) a log must not reach the package's parser."""
    bad = [(number, why, record) for number, record in lines if (why := screen_record(record)) is not None]
    reasons = [f"line {number}: {why}; the log was not given to mlperf-logging: {record[:120]}" for number, why, record in bad[:LISTED]]
    if len(bad) > LISTED:
        reasons.append(f"... and {len(bad) - LISTED} more such lines")
    return reasons


def unsafe_values(loglines, lines: list[tuple[int, str]]) -> list[str]:
    """Reasons a parsed log must not reach the compliance checker (see the
    module's docstring); ``lines`` (mllog_lines) give each record's number in the file."""
    reasons = []
    keys = path_keys()
    for ll in loglines:
        if ll.key in keys:
            value = ll.value.get("value")
            if not isinstance(value, str) or not WORD.fullmatch(value):
                reasons.append(f"line {lines[ll.lineno][0]}: {ll.key} value {value!r} is not a plain name; the log was not given to the compliance checker")
    return reasons


def check_run(path: Path, ruleset: str) -> CheckedRun:
    """One result file through the package's parser and compliance checker, as the result summarizer does."""
    from mlperf_logging.compliance_checker import mlp_compliance
    from mlperf_logging.result_summarizer.result_summarizer import _query_run_start_stop

    lines = mllog_lines(path)
    refused = screen(lines)
    if refused:
        return CheckedRun(valid=False, messages=refused, screened=True)
    loglines, failed = parse(path, ruleset)
    run = CheckedRun(valid=False, loglines=loglines)
    numbers = line_numbers(lines, [line for line, _ in failed[:LISTED]])
    run.messages += [f"line {n}: {error}: {line.strip()[:200]}" for n, (line, error) in zip(numbers, failed[:LISTED])]
    if len(failed) > LISTED:
        run.messages.append(f"... and {len(failed) - LISTED} more lines that do not parse")
    for ll in loglines:
        if ll.key == "run_stop" and isinstance(ll.value.get("metadata"), dict):
            status = ll.value["metadata"].get("status")
            run.status = status if isinstance(status, str) else repr(status)
    with contextlib.suppress(ValueError):
        start, stop = _query_run_start_stop(loglines)
        run.minutes = (stop - start) / 60 / 1000
    unsafe = unsafe_values(loglines, lines)
    if unsafe:
        run.messages += unsafe
        return run
    checker = mlp_compliance.make_checker(usage=USAGE, ruleset=ruleset, quiet=True, werror=False)
    mlp_compliance.enqueued_configs.clear()  # module state a failed earlier check may have left
    try:
        with captured():
            valid, _, _, _ = mlp_compliance.main(str(path), f"{USAGE}_{ruleset}/common.yaml", checker)
    except Exception as e:  # the checker's own code failing on this log (e.g. a value of the wrong type)
        valid = False
        checker.not_overwritable.append(f"the compliance checker failed on this log: {type(e).__name__}: {e}")
    finally:
        mlp_compliance.enqueued_configs.clear()
    run.messages += [m for m in [*checker.overwritable.values(), *checker.not_overwritable] if m not in run.messages]
    run.valid = bool(valid) and not failed
    return run


@dataclass
class RcpCheck:
    passed: bool
    message: str
    norm_factor: float
    batch_size: float | None = None
    epochs: dict[str, float] = field(default_factory=dict)  # file name -> epochs (or samples) to converge; inf: did not
    reference: dict | None = None  # the RCP record the check used: mean, min acceptable mean, max speed-up, batch size


class RcpUnreadable(Exception):
    """A log the RCP checker cannot read; the message names the file and why."""


def run_epochs(path: Path, ruleset: str) -> tuple[float, float, str | None]:
    """Epochs (or samples) to converge, global batch size and benchmark of one run, as the RCP checker reads them."""
    from mlperf_logging.rcp_checker.rcp_checker import read_submission_file

    with captured():
        not_converged, epochs, bs, benchmark = read_submission_file(str(path), ruleset, False)
    return (float("inf") if not_converged else float(epochs)), bs, benchmark


def check_rcp(folder: Path, files: list[Path], ruleset: str, bypass: bool) -> RcpCheck:
    """The RCP checker's verdict on a benchmark folder (as the package checker runs it, without writing scaling.json)."""
    from mlperf_logging.rcp_checker import rcp_checker

    epochs, batch_sizes, benchmarks = {}, set(), set()
    for f in files:
        try:
            epochs[f.name], bs, bench = run_epochs(f, ruleset)
        except Exception as e:  # the package's reader failing on this log's values
            raise RcpUnreadable(f"{f.name}: the RCP checker cannot read this log ({type(e).__name__}: {e})") from None
        if isinstance(bs, bool) or not isinstance(bs, int | float) or not math.isfinite(float(bs) if abs(bs) < 1e300 else math.inf):
            raise RcpUnreadable(f"{f.name}: global_batch_size {str(bs)[:40]} is not a number")  # it looks up references by it
        batch_sizes.add(bs)
        benchmarks.add(bench)
    known = allowed_benchmarks(ruleset)
    if len(benchmarks) != 1 or next(iter(benchmarks)) not in known:
        names = ", ".join(sorted(repr(b) for b in benchmarks))
        return RcpCheck(False, f"not checked: the runs name benchmark {names}, not one of the ruleset's", 1.0, epochs=epochs)
    benchmark = next(iter(benchmarks))
    with captured():
        passed, message, norm = rcp_checker.check_directory(
            str(folder), USAGE, ruleset, False, False, rcp_pass="pruned_rcps", rcp_bypass=bypass, set_scaling=False
        )
        reference = None
        if len(batch_sizes) == 1:
            reference = _reference(rcp_checker.RCP_Checker(USAGE, ruleset, benchmark, False), next(iter(batch_sizes)))
    return RcpCheck(
        bool(passed), message, float(norm), batch_size=next(iter(batch_sizes)) if len(batch_sizes) == 1 else None, epochs=epochs, reference=reference
    )


def _reference(checker, bs) -> dict | None:
    """The RCP record check_directory compares against, chosen the same way (exact batch size, interpolation, or the smallest)."""
    record = checker._find_rcp(bs, "pruned_rcps")
    kind = "batch size"
    if record is None:
        low, high = checker._find_top_min_rcp(bs, "pruned_rcps"), checker._find_bottom_max_rcp(bs, "pruned_rcps")
        if low is not None and high is not None:
            record, kind = checker._create_interp_rcp(bs, low, high)[1], "interpolated"
        elif low is None and high is not None:
            record, kind = checker._find_min_rcp("pruned_rcps"), "smallest batch size"
    if record is None:
        return None
    return {
        "kind": kind,
        "batch_size": record["BS"],
        "mean": float(record["RCP Mean"]),
        "min_allowed": float(record["RCP Mean"] / record["Max Speedup"]),
        "max_speedup": float(record["Max Speedup"]),
    }
