"""Property tests: random bytes, random JSON and random rows never crash the
auditor, its outputs or the leaderboard built from it; the real CLI answers
them with exit code 0 or 1 and never a traceback; and on well-formed random
logs the time to threshold is the first row at or above it."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

from conftest import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from submission_factory import CIFAR_TSV, inference_meta, train_meta, write

from dawnpipe import leaderboard
from dawnpipe.audit.core import audit
from dawnpipe.audit.output import as_json, message_table, terminal
from dawnpipe.audit.rows import submission_rows
from dawnpipe.report.render import audit_view

# DAWNPIPE_FUZZ_EXAMPLES=2000 for a longer search before a release.
SETTINGS = settings(max_examples=int(os.environ.get("DAWNPIPE_FUZZ_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.too_slow])

# whole numbers beyond what a float holds too: JSON allows them, float() of them overflows
json_scalars = st.none() | st.booleans() | st.integers() | st.sampled_from([10**400, -(10**400), 2**64]) | st.floats() | st.text(max_size=30)
json_values = st.recursive(json_scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=10), c, max_size=4), max_leaves=12)
FIELDS = [
    "version",
    "author",
    "authorEmail",
    "framework",
    "model",
    "hardware",
    "timestamp",
    "codeURL",
    "costPerHour",
    "logFilename",
    "misc",
    "latency",
    "cost",
    "top1Accuracy",
    "top5Accuracy",
    "f1Score",
]
metadata = st.fixed_dictionaries({}, optional={k: json_values for k in FIELDS}) | st.dictionaries(st.text(max_size=12), json_values, max_size=6)
cell = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-10, 10**6).map(str),
    st.sampled_from(["", " ", "nan", "1e999", "-0", "94", "0.75", "1_000", "\u00a0", "1e-320"]),
    st.text(max_size=6),
)
header = st.lists(st.sampled_from(["epoch", "hours", "top1Accuracy", "top5Accuracy", "f1Score", "loss", "Epoch", ""]), min_size=0, max_size=5)
rows = st.lists(st.lists(cell, min_size=0, max_size=5), max_size=12)


def check_everything(root: Path) -> None:
    """Audit ``root`` and render every output; none of it may raise."""
    report = audit([str(root)])
    for f in report.files:
        assert f.status in ("ok", "warning", "error")
        for m in f.messages:
            assert m.severity in ("info", "warning", "error") and m.where and m.text
    assert report.exit_code == (1 if any(f.status == "error" for f in report.files) else 0)
    terminal(report, verbose=True).encode("utf-8")
    json.dumps(as_json(report, [str(root)]), allow_nan=False)
    message_table(report)
    rows_, excluded = submission_rows(report)
    board = leaderboard.build(rows_, excluded)
    json.dumps(board, allow_nan=False)
    audit_view(report)


@SETTINGS
@given(data=st.binary(max_size=3000))
def test_random_bytes_as_a_log_never_crash(data):
    with tempfile.TemporaryDirectory() as d:
        write(Path(d), "CIFAR10/train/x.json", train_meta())
        write(Path(d), "CIFAR10/train/x.tsv", data)
        check_everything(Path(d))


@SETTINGS
@given(data=st.binary(max_size=3000))
def test_random_bytes_as_metadata_never_crash(data):
    with tempfile.TemporaryDirectory() as d:
        write(Path(d), "ImageNet/inference/x.json", data)
        write(Path(d), "SQuAD/train/x.json", data)
        write(Path(d), "SQuAD/train/x.tsv", "epoch\thours\tf1Score\n1\t0.5\t0.8\n")
        check_everything(Path(d))


@SETTINGS
@given(doc=metadata, task=st.sampled_from(["CIFAR10", "ImageNet", "SQuAD", "FashionMNIST"]))
def test_random_json_objects_never_crash(doc, task):
    with tempfile.TemporaryDirectory() as d:
        write(Path(d), f"{task}/inference/x.json", json.dumps(doc))
        write(Path(d), f"{task}/train/y.json", json.dumps({**train_meta(), **doc}))
        write(Path(d), f"{task}/train/y.tsv", CIFAR_TSV)
        check_everything(Path(d))


@SETTINGS
@given(head=header, body=rows, task=st.sampled_from(["CIFAR10", "ImageNet", "SQuAD"]), crlf=st.booleans())
def test_random_rows_never_crash(head, body, task, crlf):
    text = "\n".join("\t".join(r) for r in [head, *body]) + "\n"
    with tempfile.TemporaryDirectory() as d:
        write(Path(d), f"{task}/train/x.json", train_meta())
        write(Path(d), f"{task}/train/x.tsv", text.replace("\n", "\r\n") if crlf else text)
        check_everything(Path(d))


@SETTINGS
@given(steps=st.lists(st.tuples(st.floats(0.001, 10), st.floats(0, 100)), min_size=1, max_size=30))
def test_time_to_threshold_is_the_first_row_at_or_above_it(steps):
    """Well-formed logs with increasing hours: the recomputed time is that of
    the first row whose accuracy is >= 94, found here by a plain scan."""
    hours, lines = 0.0, ["epoch\thours\ttop1Accuracy"]
    expected = None
    for epoch, (dt, acc) in enumerate(steps, start=1):
        hours += dt
        lines.append(f"{epoch}\t{hours!r}\t{acc!r}")
        if expected is None and acc >= 94.0:
            expected = (float(repr(hours)), epoch)
    with tempfile.TemporaryDirectory() as d:
        write(Path(d), "CIFAR10/train/x.json", train_meta())
        write(Path(d), "CIFAR10/train/x.tsv", "\n".join(lines) + "\n")
        report = audit([d])
        (sub,) = report.submissions
        if expected is None:
            assert not sub.figures["reached"] and sub.notes
        else:
            assert (sub.figures["hours_to_threshold"], sub.figures["epochs_to_threshold"]) == expected
            assert math.isclose(sub.figures["cost_usd"], expected[0] * 3.06)
        assert report.exit_code == 0


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(tsv=st.binary(max_size=400), meta=st.binary(max_size=400), inference=metadata)
def test_the_real_cli_never_shows_a_traceback(tmp_path_factory, tsv, meta, inference):
    root = tmp_path_factory.mktemp("cli")
    write(root, "CIFAR10/train/x.tsv", tsv)
    write(root, "CIFAR10/train/x.json", meta)
    write(root, "SQuAD/inference/y.json", json.dumps(inference))
    out = root / "out"
    proc = run_cli("audit", str(root), "--json", str(out / "a.json"), "--parquet", str(out / "a.parquet"), timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert json.loads((out / "a.json").read_text())["summary"]["exit_code"] == proc.returncode


def test_inference_meta_helper_is_valid():
    """The property tests start from helpers that are themselves clean."""
    with tempfile.TemporaryDirectory() as d:
        for task in ("CIFAR10", "ImageNet", "SQuAD", "FashionMNIST"):
            write(Path(d), f"{task}/inference/x.json", inference_meta(task))
        assert audit([d]).exit_code == 0
