"""dawnpipe mlperf score: MLPerf Training results scored and checked with
mlperf-logging, against the package's own result summarizer (run here, on a
copy: it writes beside the results) and against scores worked out by hand.

Fixtures are real v4.0 logs from ../shared/mlperf-results, rewritten in a
temporary directory: a run's length set by moving its run_stop, a run aborted,
one without run_stop, one below the target, forty unet3d runs, a scaling.json.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, SHARED, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cli_fuzz import mllog_records
from test_cli_fuzz import run as run_in_process

from dawnpipe.olympic import olympic_mean

TOKEN = ":::MLLOG "


def mlperf_dir() -> Path:
    if not (SHARED / "mlperf-results").is_dir():
        pytest.skip(f"{SHARED}/mlperf-results is absent (the shared data beside the repository)")
    return SHARED / "mlperf-results"


def template(benchmark: str) -> tuple[Path, Path]:
    """(a real result file, its system description) for a benchmark in ../shared."""
    for submitter in sorted(mlperf_dir().iterdir()):
        for folder in sorted((submitter / "results").glob(f"*/{benchmark}")):
            return folder / "result_0.txt", submitter / "systems" / f"{folder.parent.name}.json"
    raise AssertionError(f"no {benchmark} results in {mlperf_dir()}")


def rewrite(src: Path, dst: Path, minutes: float | None = None, *, status=None, drop_run_stop=False, below_target=False, epochs=None) -> None:
    """``src`` with run_stop moved to ``minutes`` after run_start (later than any other line),
    its status changed, run_stop removed, every eval_accuracy cut to 0.1, or its epoch_num capped at ``epochs``."""
    lines, start = [], None
    for line in src.read_text(encoding="latin-1").splitlines(keepends=True):
        if TOKEN in line:
            prefix, body = line.split(TOKEN, 1)
            record = json.loads(body)
            if record["key"] == "run_start":
                start = record["time_ms"]
            if record["key"] == "run_stop":
                if drop_run_stop:
                    continue
                if minutes is not None:
                    record["time_ms"] = start + minutes * 60_000
                if status is not None:
                    record["metadata"]["status"] = status
            if below_target and record["key"] == "eval_accuracy":
                record["value"] = 0.1
            if epochs is not None and record["key"] == "eval_accuracy":
                record["metadata"]["epoch_num"] = min(record["metadata"]["epoch_num"], epochs)
            line = prefix + TOKEN + json.dumps(record) + "\n"
        lines.append(line)
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text("".join(lines), encoding="latin-1")


def submission(root: Path, benchmark: str, runs: list[dict], *, submitter="Sub", system="sys1", scaling=None, desc_change=None) -> Path:
    src, desc = template(benchmark)
    folder = root / submitter / "results" / system / benchmark
    for i, spec in enumerate(runs):
        rewrite(src, folder / f"result_{i}.txt", **spec)
    doc = json.loads(desc.read_text())
    doc.update({"submitter": submitter, **(desc_change or {})})
    (root / submitter / "systems").mkdir(parents=True, exist_ok=True)
    (root / submitter / "systems" / f"{system}.json").write_text(json.dumps(doc))
    if scaling is not None:
        (folder / "scaling.json").write_text(json.dumps({"scaling_factor": scaling}))
    return root / submitter


def score(tmp: Path, *paths, ruleset="4.0.0", expect_rc=None, extra=()):
    """``dawnpipe mlperf score PATHS --json``, the JSON written under the test's
    own ``tmp`` (a folder of its own for each call), never beside the folders
    scored: the shared results are read-only and shared by every worker."""
    out = Path(tempfile.mkdtemp(dir=tmp)) / "score.json"
    proc = run_cli("mlperf", "score", *map(str, paths), "--ruleset", ruleset, "--json", str(out), *extra)
    assert "Traceback" not in proc.stderr, proc.stderr
    if expect_rc is not None:
        assert proc.returncode == expect_rc, proc.stdout + proc.stderr
    return proc, json.loads(out.read_text()) if out.exists() else None


def summarizer(submitter_dir: Path, tmp: Path) -> pd.DataFrame:
    """MLCommons' result summarizer on a copy of ``submitter_dir`` (it writes scaling.json beside the runs)."""
    copy = tmp / "summarizer-copy" / submitter_dir.name
    shutil.copytree(submitter_dir, copy)
    os.chmod(copy, 0o755)
    for d, _, _ in os.walk(copy):
        os.chmod(d, 0o755)
    csv = tmp / f"{submitter_dir.name}.csv"
    proc = subprocess.run(
        [sys.executable, "-m", "mlperf_logging.result_summarizer", str(copy), "training", "4.0.0", "--csv", str(csv)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return pd.read_csv(csv)


def official_score(frame: pd.DataFrame, benchmark: str) -> float | None:
    if frame.empty or benchmark not in frame or pd.isna(frame[benchmark].iloc[0]):
        return None
    return float(frame[benchmark].iloc[0])


def listing(root: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(root)), p.stat().st_mtime_ns) for p in root.rglob("*"))


@pytest.mark.slow
def test_every_shared_result_scores_as_the_official_summarizer(tmp_path):
    """Each real folder: dawnpipe's score equals the summarizer's to the last bit; all clean (exit 0).
    Scoring writes nothing into the folders it scores, nor beside them (docs/mlperf.md)."""
    before = listing(mlperf_dir().parent)
    proc, doc = score(tmp_path, mlperf_dir(), expect_rc=0)
    assert listing(mlperf_dir().parent) == before
    results = {(r["submitter"], r["benchmark"]): r for r in doc["results"]}
    assert len(results) == 4
    for submitter in sorted(p for p in mlperf_dir().iterdir() if p.is_dir()):
        frame = summarizer(submitter, tmp_path)
        (benchmark,) = [b.name for b in (submitter / "results").glob("*/*")]
        mine = results[(submitter.name, benchmark)]
        assert mine["score_minutes"] == official_score(frame, benchmark), submitter.name
        assert mine["system_name"] == frame["system"].iloc[0] and mine["accelerators_count"] == frame["accelerators_count"].iloc[0]
        assert mine["rcp"]["verdict"] == "pass" and all(run["compliant"] and run["converged"] for run in mine["runs"])
        assert mine["runs_required"] == len(mine["runs"])
    # Fujitsu's unet3d was normalised by the RCP check: its scaling.json is what the check implies
    unet = results[("Fujitsu", "unet3d")]
    assert unet["scaling_factor"] == unet["rcp"]["normalization_factor"] == unet["rcp"]["scaling_json"] > 1.0
    assert unet["rcp"]["mean"] < unet["rcp"]["reference_mean"] and unet["rcp"]["mean"] >= unet["rcp"]["min_allowed"]
    assert "26.882" in proc.stdout and "23.684" in proc.stdout
    keys = {"submitter", "system", "system_name", "benchmark", "ruleset", "division", "accelerator", "accelerators_count", "framework"}
    keys |= {"score_minutes", "reason", "scaling_factor", "runs", "rcp"}
    assert keys <= set(doc["results"][0]) and set(doc["results"][0]["runs"][0]) >= {"file", "minutes", "status", "compliant", "converged", "messages"}


def test_the_terminal_shows_every_run(tmp_path):
    """Each run's minutes (run_stop - run_start, read here from the log's own
    records), its run_stop status and verdicts, under its result's row."""
    folder = submission(tmp_path, "resnet", [{"minutes": m} for m in (30, 31.5, 32, 33)] + [{"minutes": 29, "status": "aborted", "below_target": True}])
    proc, _ = score(tmp_path, folder, expect_rc=0)
    rows = proc.stdout.splitlines()
    at = next(i for i, line in enumerate(rows) if line.startswith("warning  Sub/sys1/resnet "))
    for i in range(5):
        times = {}
        for line in (folder / "results" / "sys1" / "resnet" / f"result_{i}.txt").read_text(encoding="latin-1").splitlines():
            if TOKEN in line:
                record = json.loads(line.split(TOKEN, 1)[1])
                times.setdefault(record["key"], record["time_ms"])
        minutes = (times["run_stop"] - times["run_start"]) / 60_000
        verdict = "compliant, converged" if i < 4 else "dropped, not converged"
        status = "success" if i < 4 else "aborted"
        assert rows[at + 1 + i].split() == [f"result_{i}.txt", f"{minutes:.3f}", "min", status, *verdict.split()], rows[at + 1 + i]


@pytest.mark.slow
def test_hand_computed_scores_and_the_summarizer_agree(tmp_path):
    """Generated results whose scores are worked out here, then also checked against the summarizer."""
    good = [{"minutes": m} for m in (30, 31, 32, 35)]
    mixed = submission(tmp_path / "a", "resnet", [*good, {"minutes": 29, "status": "aborted", "below_target": True}])
    failing = submission(tmp_path / "b", "resnet", [{"minutes": m} for m in (30, 31, 32)] + [{"drop_run_stop": True}, {"minutes": 28, "below_target": True}])
    forty = submission(tmp_path / "c", "unet3d", [{"minutes": m} for m in range(1, 41)], scaling=1.5)
    three_failed = submission(tmp_path / "d", "unet3d", [{"minutes": m} for m in range(1, 38)] + [{"minutes": 0.5, "below_target": True}] * 3)

    scored = {}  # each folder's score, compared with the summarizer's at the end
    _, doc = scored[mixed] = score(tmp_path, mixed, expect_rc=0)
    (r,) = doc["results"]
    assert r["score_minutes"] == pytest.approx((31 + 32 + 35) / 3, rel=1e-12)  # the aborted run counts as the slowest: 30 and it dropped
    aborted = r["runs"][4]
    assert (aborted["status"], aborted["compliant"], aborted["converged"]) == ("aborted", False, False)
    assert any("eval_accuracy" in m for m in aborted["messages"])
    assert [run["minutes"] for run in r["runs"][:4]] == pytest.approx([30, 31, 32, 35])

    proc, doc = scored[failing] = score(tmp_path, failing, expect_rc=1)
    (r,) = doc["results"]
    assert r["score_minutes"] is None and r["reason"] == "2 of 5 runs failed the compliance check; at most 1 may be dropped"
    assert r["runs"][3]["status"] is None and any("run_stop" in m for m in r["runs"][3]["messages"])
    assert r["runs"][4]["status"] == "success" and not r["runs"][4]["converged"]
    # the RCP checker reads convergence from run_stop's status alone: only the run without run_stop did not converge for it
    assert r["rcp"]["epochs"]["result_3.txt"] is None and r["rcp"]["epochs"]["result_4.txt"] is not None
    assert "no score: 2 of 5 runs failed" in proc.stdout

    _, doc = scored[forty] = score(tmp_path, forty)
    (r,) = doc["results"]
    assert r["score_minutes"] == pytest.approx(sum(range(5, 37)) / 32 * 1.5, rel=1e-12)  # four dropped at each end, times scaling.json
    assert r["scaling_factor"] == 1.5 and r["runs_required"] == 40
    # every run converges in the same samples here: the check implies another factor than 1.5, and says so
    implied = r["rcp"]["normalization_factor"]
    assert r["rcp"]["verdict"] == "pass" and implied == pytest.approx(r["rcp"]["reference_mean"] / r["rcp"]["mean"])
    assert f"scaling.json says 1.5, but the convergence check implies a factor of {implied!r}" in r["errors"]

    _, doc = scored[three_failed] = score(tmp_path, three_failed, expect_rc=1)
    (r,) = doc["results"]
    assert [e for e in r["errors"] if e.startswith("there is no scaling.json, but the convergence check implies")]
    minutes = sorted(range(1, 38))
    assert r["score_minutes"] == pytest.approx(sum(minutes[4:36]) / 32, rel=1e-12)  # three failures fill three of the four slow drops

    for folder, benchmark in ((mixed, "resnet"), (failing, "resnet"), (forty, "unet3d"), (three_failed, "unet3d")):
        _, doc = scored[folder]
        assert doc["results"][0]["score_minutes"] == official_score(summarizer(folder, tmp_path / folder.parent.name), benchmark)


def test_scaling_written_by_the_rcp_checker_itself_is_accepted(tmp_path):
    from mlperf_logging.rcp_checker import rcp_checker

    folder = submission(tmp_path, "unet3d", [{"minutes": m} for m in range(1, 41)])
    bench = folder / "results" / "sys1" / "unet3d"
    rcp_checker.check_directory(str(bench), "training", "4.0.0", False, False, rcp_pass="pruned_rcps", set_scaling=True)
    assert (bench / "scaling.json").exists()
    _, doc = score(tmp_path, folder, expect_rc=0)
    assert doc["results"][0]["errors"] == [] and doc["results"][0]["scaling_factor"] > 1.0


def test_a_scaling_factor_beyond_what_a_float_holds_is_an_error(tmp_path):
    folder = submission(tmp_path, "resnet", [{"minutes": m} for m in (30, 31, 32, 33, 34)])
    scaling = folder / "results" / "sys1" / "resnet" / "scaling.json"
    scaling.write_text('{"scaling_factor": 1' + "0" * 400 + "}")
    _, doc = score(tmp_path, folder, expect_rc=1)
    (r,) = doc["results"]
    assert r["score_minutes"] is None and r["reason"] == "scaling.json cannot be read"
    assert f"{scaling}: field 'scaling_factor': a whole number beyond 64 bits (1000000000...); not read" in r["errors"]


def test_a_scaling_json_linked_to_nothing_is_read_as_absent_and_named(tmp_path):
    """os.path.exists, which the result summarizer asks, is False for a symbolic
    link to nothing: the factor is 1.0 as there, and the warning names the link."""
    folder = submission(tmp_path, "resnet", [{"minutes": m} for m in (30, 31, 32, 33, 34)])
    scaling = folder / "results" / "sys1" / "resnet" / "scaling.json"
    scaling.symlink_to(tmp_path / "gone.json")
    _, doc = score(tmp_path, folder)
    (r,) = doc["results"]
    assert r["scaling_factor"] == 1.0 and r["score_minutes"] == pytest.approx(32.0, rel=1e-12)  # 30 and 34 dropped
    assert (
        f"{scaling}: a symbolic link to nothing ({str(tmp_path / 'gone.json')!r}); read as absent (factor 1.0), as the result summarizer reads it"
        in r["warnings"]
    )


def test_too_few_runs_and_a_missing_system_description_are_errors(tmp_path):
    folder = submission(tmp_path, "resnet", [{"minutes": m} for m in (30, 31, 32)])
    (folder / "systems" / "sys1.json").unlink()
    proc, doc = score(tmp_path, folder / "results" / "sys1" / "resnet", expect_rc=1)  # one benchmark folder as PATH
    errors = doc["results"][0]["errors"]
    assert any("3 runs; the rules require 5" in e for e in errors)
    assert any("sys1.json: no system description" in e for e in errors)


@pytest.mark.slow
def test_a_failed_convergence_check_and_its_bypass(tmp_path):
    """Runs converging in fewer epochs than the reference allows fail the RCP
    check (an error); package_checker_params 'rcp-bypass' makes it a warning,
    read as the package checker reads it (a line equal to it: a newline after
    it is not read, and dawnpipe says so)."""
    folder = submission(tmp_path, "unet3d", [{"minutes": m, "epochs": 100_000} for m in range(1, 41)])
    bench = folder / "results" / "sys1" / "unet3d"
    _, doc = score(tmp_path, folder, expect_rc=1)
    rcp = doc["results"][0]["rcp"]
    assert rcp["verdict"] == "fail" and rcp["message"] == "RCP found" and rcp["mean"] == 100_000 < rcp["min_allowed"]
    assert doc["results"][0]["score_minutes"] == pytest.approx(20.5)  # the summarizer's score does not depend on the RCP check
    # a batch size below every reference's: no reference to compare with (an error too)
    _, doc = score(tmp_path, submission(tmp_path / "r", "resnet", [{"minutes": m} for m in (30, 31, 32, 33, 34)]))
    assert doc["results"][0]["rcp"]["verdict"] == "pass"  # slower than the smallest batch size's reference: allowed
    _, doc = score(tmp_path, submission(tmp_path / "r2", "resnet", [{"minutes": m, "epochs": 20} for m in (30, 31, 32, 33, 34)]), expect_rc=1)
    assert doc["results"][0]["rcp"]["verdict"] == "no reference" and "Missing RCP" in doc["results"][0]["rcp"]["message"]
    (bench / "package_checker_params").write_text("rcp-bypass\n")
    _, doc = score(tmp_path, folder, expect_rc=1)
    assert any("followed by a newline is not read" in w for w in doc["results"][0]["warnings"])
    (bench / "package_checker_params").write_text("rcp-bypass")
    _, doc = score(tmp_path, folder, expect_rc=0)
    assert doc["results"][0]["rcp"]["verdict"] == "bypassed" and any("bypassed by package_checker_params" in w for w in doc["results"][0]["warnings"])


def test_stability_has_the_mlperf_style_olympic_score():
    from dawnpipe.metrics.stability import stability

    def rec(seed, hours, reached=True):
        return {"seed": seed, "time_to_accuracy_hours": hours, "epochs_to_accuracy": 3, "reached": reached}

    five = [rec(i, h) for i, h in enumerate([1.0, 2.0, 3.0, 4.0, 10.0])]
    assert stability("e", five)["olympic_tta_hours"] == pytest.approx(3.0)
    one_missed = [*five[:4], rec(4, None, reached=False)]
    assert stability("e", one_missed)["olympic_tta_hours"] == pytest.approx((2.0 + 3.0 + 4.0) / 3)  # the miss is the slowest
    two_missed = [*five[:3], rec(3, None, False), rec(4, None, False)]
    assert stability("e", two_missed)["olympic_tta_hours"] is None
    assert stability("e", five[:4])["olympic_tta_hours"] is None  # fewer than five seeds
    assert olympic_mean([1.0, 2.0, 3.0], 0) == 2.0 and olympic_mean([], 1) is None


# --- hostile input -------------------------------------------------------------------------------


def hostile(tmp_path, name: str, data: bytes) -> Path:
    folder = submission(tmp_path, "resnet", [{"minutes": m} for m in (30, 31, 32, 33, 34)])
    (folder / "results" / "sys1" / "resnet" / "result_4.txt").write_bytes(data)
    return folder


# random bytes from a fixed seed: the same in every pytest-xdist worker (their collections must agree) and in every rerun
_BYTES = random.Random(20261126)
BINARY = _BYTES.randbytes(1 << 16).replace(b"\r", b"") + b"\n:::MLLOG \xff\xfe{\n" + _BYTES.randbytes(4096).replace(b"\r", b"")  # no \r: \n alone ends a line
BINARY_LINE = BINARY[: BINARY.index(b":::MLLOG")].count(b"\n") + 1


@pytest.mark.parametrize(
    "name, data, message",
    [
        ("not-mllog", b"Beginning trial 1 of 5\nall good\n" * 100, "No log lines detected"),
        ("binary", BINARY, f"line {BINARY_LINE}: "),
        ("broken-json", b':::MLLOG {"namespace": "", "time_ms": 1, "key": "run_start", \n', "line 1: "),
    ],
    ids=["not-mllog", "binary", "broken-json"],
)
def test_a_hostile_log_is_one_dropped_run_with_its_reason(tmp_path, name, data, message):
    folder = hostile(tmp_path, name, data)
    proc, doc = score(tmp_path, folder)
    (r,) = doc["results"]
    bad = r["runs"][4]
    assert not bad["compliant"] and any(message in m for m in bad["messages"]), bad["messages"]
    assert r["score_minutes"] == pytest.approx((31 + 32 + 33) / 3)  # dropped as the slowest; the others still score
    assert "result_4.txt: dropped (counts as the slowest run): " in proc.stdout


def test_a_line_that_does_not_parse_is_named_by_its_line_in_the_file(tmp_path):
    """The parser's own rejections (not JSON, a time that is no number) name
    the line's number in the file, not its rank among the rejected lines."""
    folder = submission(tmp_path, "resnet", [{"minutes": m} for m in (30, 31, 32, 33, 34)])
    log = folder / "results" / "sys1" / "resnet" / "result_4.txt"
    lines = log.read_text(encoding="latin-1").splitlines(keepends=True)
    lines.insert(10, "0: " + TOKEN + '{"broken": \n')
    lines.insert(20, TOKEN + '{"namespace": "", "time_ms": "1.2.3", "key": "x", "value": 1, "metadata": {}}\n')
    log.write_text("".join(lines), encoding="latin-1")
    _, doc = score(tmp_path, folder)
    messages = doc["results"][0]["runs"][4]["messages"]
    assert [m.split(":")[0] for m in messages[:2]] == ["line 11", "line 21"], messages
    assert messages[0].endswith(TOKEN + '{"broken":') and "could not convert string to float: '1.2.3'" in messages[1]


RECORD = '"namespace": "", "event_type": "POINT_IN_TIME", "value": 1, "metadata": {}'


@pytest.mark.parametrize(
    "line, says",
    [
        ('{"time_ms": 1, ' + RECORD + "}", "no 'key' field"),
        ("[1, 2]", "not a JSON object (list)"),
        ('"run_stop"', "not a JSON object (str)"),
        ('{"key": ["run_stop"], "time_ms": 1, ' + RECORD + "}", "'key' is not a string"),
        ('{"key": "x", "time_ms": [1], ' + RECORD + "}", "'time_ms' is not a number"),
        ('{"key": "x", "time_ms": NaN, ' + RECORD + "}", "'time_ms' is not a finite number"),
        ('{"key": "x", "time_ms": 1' + "0" * 400 + ", " + RECORD + "}", "'time_ms' is not a finite number"),
        ('{"key": "x", "time_ms": 1, "a": ' + "[" * 100_000 + "]" * 100_000 + ", " + RECORD + "}", "nested too deeply to read"),
    ],
    ids=["no-key", "a-list", "a-string", "key-a-list", "time-a-list", "time-nan", "time-too-big", "deep"],
)
def test_an_mllog_line_the_parser_cannot_take_is_one_dropped_run_naming_the_line(tmp_path, line, says):
    """Lines that would make mlperf-logging's parser itself fail (a KeyError,
    a TypeError, a RecursionError) or hand on a time that is not finite: the
    run is dropped naming its line in the file, the log is given neither to
    the package's parser nor to its RCP checker (so no convergence verdict: an
    error, as for a log over the size cap), the others still score, and the
    JSON is written."""
    folder = submission(tmp_path, "resnet", [{"minutes": m} for m in (30, 31, 32, 33, 34)])
    log = folder / "results" / "sys1" / "resnet" / "result_4.txt"
    text = log.read_text(encoding="latin-1")
    log.write_text(text + TOKEN + line + "\n", encoding="latin-1")
    number = text.count("\n") + 1
    proc, doc = score(tmp_path, folder, expect_rc=1)
    (r,) = doc["results"]
    assert r["rcp"]["verdict"] == "not checked" and "convergence (RCP) check not run: result_4.txt not given to mlperf-logging" in r["errors"]
    bad = r["runs"][4]
    assert (bad["compliant"], bad["converged"], bad["minutes"]) == (False, False, None)
    assert bad["messages"][0].startswith(f"line {number}: {says}; the log was not given to mlperf-logging"), bad["messages"]
    assert r["score_minutes"] == pytest.approx((31 + 32 + 33) / 3)
    assert f"result_4.txt: dropped (counts as the slowest run): line {number}: {says}" in proc.stdout


def test_a_run_stop_at_an_infinite_time_is_dropped_not_scored(tmp_path):
    """run_stop at time_ms Infinity (JSON's extension Python reads): not a run of infinite minutes in the JSON (which cannot hold one)."""
    folder = submission(tmp_path, "resnet", [{"minutes": m} for m in (30, 31, 32, 33)] + [{"minutes": math.inf}])
    log = folder / "results" / "sys1" / "resnet" / "result_4.txt"
    (number,) = [n for n, line in enumerate(log.read_text(encoding="latin-1").splitlines(), 1) if '"key": "run_stop"' in line]
    proc, doc = score(tmp_path, folder, expect_rc=1)
    (r,) = doc["results"]
    assert r["runs"][4]["minutes"] is None and r["runs"][4]["messages"][0].startswith(f"line {number}: 'time_ms' is not a finite number")
    assert r["score_minutes"] == pytest.approx((31 + 32 + 33) / 3)  # the dropped run counts as the slowest


@pytest.fixture(scope="module")
def fuzzed_folder(tmp_path_factory):
    """A result folder of five real runs; the tests below rewrite its result_4.txt."""
    return submission(tmp_path_factory.mktemp("fuzz"), "resnet", [{"minutes": m} for m in (30, 31, 32, 33, 34)])


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(records=st.lists(mllog_records, min_size=1, max_size=3), at=st.integers(0, 400))
def test_random_mllog_records_in_a_real_log_never_crash(fuzzed_folder, records, at):
    """Records of any shape and value inserted into a real log: exit 0 or 1,
    never a traceback or an internal error, the JSON always written and the
    four good runs still scored."""
    log = fuzzed_folder / "results" / "sys1" / "resnet" / "result_4.txt"
    original = fuzzed_folder / "result_4.original"
    if not original.exists():
        shutil.copy(log, original)
    lines = original.read_text(encoding="latin-1").splitlines(keepends=True)
    lines[at:at] = [r + "\n" for r in records]
    log.write_text("".join(lines), encoding="latin-1")
    out = fuzzed_folder / "fuzz.json"
    out.unlink(missing_ok=True)
    code, stdout, stderr = run_in_process(["mlperf", "score", str(fuzzed_folder), "--json", str(out)])
    assert code in (0, 1) and "Traceback" not in stdout + stderr and "internal error" not in stderr, stderr[-2000:]
    (r,) = json.loads(out.read_text())["results"]
    assert [run["compliant"] for run in r["runs"][:4]] == [True] * 4
    assert r["score_minutes"] is not None and math.isfinite(r["score_minutes"])


@pytest.mark.parametrize(
    "key, change, says",
    [
        ("run_stop", {"metadata": [1, 2]}, "the RCP checker cannot read this log (TypeError: "),
        ("eval_accuracy", {"metadata": {}}, "the RCP checker cannot read this log (KeyError: 'epoch_num')"),
        ("global_batch_size", {"value": "big"}, "global_batch_size big is not a number"),
        ("global_batch_size", {"value": 10**400}, "global_batch_size 1000000000000000000000000000000000000000 is not a number"),
        ("global_batch_size", {"value": [64]}, "global_batch_size [64] is not a number"),
    ],
)
def test_a_log_the_rcp_checker_cannot_read_is_named(tmp_path, key, change, says):
    """A log the compliance checker rejects (one dropped run) but on which the
    RCP checker would raise: the convergence error names the file and why."""
    folder = submission(tmp_path, "resnet", [{"minutes": m} for m in (30, 31, 32, 33, 34)])
    log = folder / "results" / "sys1" / "resnet" / "result_4.txt"
    lines = []
    for line in log.read_text(encoding="latin-1").splitlines(keepends=True):
        if TOKEN in line and json.loads(line.split(TOKEN, 1)[1])["key"] == key:
            line = TOKEN + json.dumps(json.loads(line.split(TOKEN, 1)[1]) | change) + "\n"
        lines.append(line)
    log.write_text("".join(lines), encoding="latin-1")
    _, doc = score(tmp_path, folder, expect_rc=1)
    (r,) = doc["results"]
    assert r["rcp"]["verdict"] == "error" and r["rcp"]["message"].startswith(f"result_4.txt: {says}"), r["rcp"]
    assert f"convergence (RCP) check failed: result_4.txt: {says}" in " ".join(r["errors"])
    assert r["score_minutes"] == pytest.approx(32.0)


def test_a_result_file_that_cannot_be_read_is_one_dropped_run(tmp_path):
    """A dangling symbolic link, a FIFO, /dev/zero named result_*.txt: each one
    dropped run with its reason; the command goes on (a dangling link stopped
    it, every other result unscored)."""
    folder = submission(tmp_path, "resnet", [{"minutes": m} for m in (30, 31, 32, 33)])
    bench = folder / "results" / "sys1" / "resnet"
    (bench / "result_4.txt").symlink_to(tmp_path / "nowhere")
    other = submission(tmp_path / "o", "resnet", [{"minutes": m} for m in (30, 31, 32, 33)])
    os.mkfifo(other / "results" / "sys1" / "resnet" / "result_4.txt")
    (other / "results" / "sys1" / "resnet" / "result_5.txt").symlink_to("/dev/zero")
    _, doc = score(tmp_path, folder, other, expect_rc=1)
    first, second = doc["results"]
    assert first["runs"][4]["messages"] == ["cannot be read: No such file or directory"] and first["score_minutes"] == pytest.approx(32.0)
    assert [r["messages"] for r in second["runs"][4:]] == [["not a regular file"], ["not a regular file"]]
    assert second["score_minutes"] is None and second["reason"] == "2 of 6 runs failed the compliance check; at most 1 may be dropped"


def test_a_100_mb_log_is_not_read(tmp_path):
    folder = hostile(tmp_path, "huge", b"")
    huge = folder / "results" / "sys1" / "resnet" / "result_4.txt"
    with open(huge, "wb") as f:
        f.truncate(100 << 20)  # 100 MB of zeros (sparse): refused by its size before anything reads it
    proc, doc = score(tmp_path, folder, expect_rc=1)
    (r,) = doc["results"]
    assert r["runs"][4]["messages"] == ["104,857,600 bytes, over the 33,554,432-byte cap (--max-bytes); not read"]
    assert r["rcp"]["verdict"] == "not checked" and r["score_minutes"] == pytest.approx(32.0)


def test_markup_and_control_characters_in_a_system_name_are_escaped(tmp_path):
    folder = submission(tmp_path, "resnet", [{"minutes": m} for m in (30, 31, 32, 33, 34)], desc_change={"system_name": "<script>alert(1)</script>\x1b[2J"})
    proc, doc = score(tmp_path, folder, expect_rc=0)
    assert "\x1b" not in proc.stdout
    out = tmp_path / "lb"
    run_cli("leaderboard", "--mlperf", str(folder), "--json", str(out / "b.json"), "--html", str(out / "b.html"), check=True)
    html = (out / "b.html").read_text()
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    table = next(t for t in json.loads((out / "b.json").read_text())["objectives"] if t["task"] == "mlperf/resnet")
    assert table["rows"][0]["value"] == pytest.approx(32.0) and table["rows"][0]["display"] == "32.000 min"


def test_a_log_naming_a_rules_file_outside_the_package_is_not_checked(tmp_path):
    """The compliance checker runs the Python of the rules file a log names
    (submission_division -> '<division>_common.yaml'): without dawnpipe's
    screening, a submission could bring that file. Shown here first with the
    package itself, then through dawnpipe, where nothing runs."""
    from mlperf_logging.compliance_checker import mlp_compliance

    marker = tmp_path / "ran"
    evil = tmp_path / "evil_common.yaml"
    evil.write_text(f"- BEGIN:\n    CODE: \"open({str(marker)!r}, 'w').write('x')\"\n")
    rules_dir = Path(mlp_compliance.__file__).parent / "training_4.0.0"
    division = os.path.relpath(tmp_path / "evil", rules_dir)
    src, _ = template("resnet")
    folder = submission(tmp_path / "sub", "resnet", [{"minutes": m} for m in (30, 31, 32, 33, 34)])
    log = folder / "results" / "sys1" / "resnet" / "result_4.txt"
    log.write_text(
        log.read_text(encoding="latin-1").replace(
            '"key": "submission_division", "value": "closed"', f'"key": "submission_division", "value": {json.dumps(division)}'
        )
    )
    assert division in log.read_text()

    checker = mlp_compliance.make_checker("training", "4.0.0", True, False)
    mlp_compliance.enqueued_configs.clear()
    mlp_compliance.main(str(log), "training_4.0.0/common.yaml", checker)
    assert marker.exists()  # the package alone runs the submission's file
    marker.unlink()

    proc, doc = score(tmp_path, folder)
    assert not marker.exists()
    bad = doc["results"][0]["runs"][4]
    (number,) = [n for n, line in enumerate(log.read_text(encoding="latin-1").splitlines(), 1) if '"submission_division"' in line]
    assert not bad["compliant"] and any(m.startswith(f"line {number}: submission_division value") and "not a plain name" in m for m in bad["messages"])


def test_usage_errors_exit_2(tmp_path):
    proc = run_cli("mlperf", "score", str(tmp_path))
    assert proc.returncode == 2 and "no MLPerf results under it" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli("mlperf", "score", str(mlperf_dir()), "--ruleset", "9.9.9")
    assert proc.returncode == 2 and "--ruleset '9.9.9'" in proc.stderr
    proc = run_cli("mlperf", "score", str(tmp_path / "absent"))
    assert proc.returncode == 2 and "not a directory" in proc.stderr


def test_parquet_has_one_row_per_run(tmp_path):
    out = tmp_path / "runs.parquet"
    run_cli("mlperf", "score", str(mlperf_dir() / "Dell"), "--parquet", str(out), check=True)
    frame = pd.read_parquet(out)
    assert len(frame) == 5 and set(frame["compliant"]) == {True} and math.isclose(frame["score_minutes"].iloc[0], 26.881916666666665)


# The result summarizer's helpers dawnpipe.mlperf.official takes though they are
# private (no public API does the same): name -> its parameters at the pinned version.
PRIVATE = {
    "_benchmark_alias": ["benchmark"],
    "_pretty_system_name": ["system_desc"],
    "_pretty_accelerator_model_name": ["system_desc"],
    "_pretty_framework": ["system_desc"],
    "_query_run_start_stop": ["loglines"],
}


def test_the_private_helpers_taken_from_mlperf_logging_are_pinned_and_still_there():
    """An upgrade of mlperf-logging that renames, drops or re-signs one of the
    private helpers official.py calls fails here, loudly, not as a changed
    score; a private name newly used without being listed here fails too."""
    import importlib.metadata
    import inspect
    import re

    from mlperf_logging.result_summarizer import result_summarizer as rs

    from dawnpipe.mlperf import official

    pins = dict(line.split("==", 1) for line in (ROOT / "requirements.txt").read_text().splitlines() if line.startswith("mlperf-logging=="))
    assert pins == {"mlperf-logging": importlib.metadata.version("mlperf-logging")}, "mlperf-logging must be pinned to the installed version"
    used = set(re.findall(r"\b(?:import |rs\.)(_[a-z]\w*)", Path(official.__file__).read_text(encoding="utf-8")))
    assert used == set(PRIVATE), f"official.py's private names of mlperf-logging: {sorted(used)}; listed: {sorted(PRIVATE)}"
    for name, parameters in PRIVATE.items():
        assert list(inspect.signature(getattr(rs, name)).parameters) == parameters, name
    # what the score relies on: a result folder's name -> its benchmark
    assert [official.benchmark_alias(f) for f in ("mask", "maskrcnn", "resnet", "bert")] == ["maskrcnn", "maskrcnn", "resnet", "bert"]
