"""The auditor, one fixture per quirk and per error class: harmless quirks are
warnings and change no figure; wrong data is an error naming the file, the
field or line, and the reason."""

from __future__ import annotations

import math

import pytest
from submission_factory import CIFAR_TSV, DROP, codes, inference_meta, messages, submission, train_meta, train_pair, write

from dawnpipe.audit.core import audit
from dawnpipe.audit.rows import submission_rows

NAME = "team_resnet9_1v100_pytorch"


def run(root):
    return audit([str(root)])


def test_clean_submission_is_ok_and_figures_are_recomputed_from_the_log(tmp_path):
    train_pair(tmp_path)
    report = run(tmp_path)
    assert [f.status for f in report.files] == ["ok", "ok"]
    sub = submission(report, NAME)
    assert sub.valid and not sub.notes
    # line 4 of CIFAR_TSV: "3  0.03  94.2" is the first row at >= 94
    assert sub.figures["reached"] and sub.figures["hours_to_threshold"] == 0.03 and sub.figures["epochs_to_threshold"] == 3
    assert sub.figures["threshold_line"] == 4
    assert sub.figures["cost_usd"] == pytest.approx(0.03 * 3.06)
    assert report.exit_code == 0


# ------------------------------------------------------------------- quirks
QUIRKS = {
    # name: (files to write, file suffix, expected warning code)
    "bom-tsv": (lambda r: train_pair(r, tsv=b"\xef\xbb\xbf" + CIFAR_TSV.encode()), ".tsv", "file.bom"),
    "bom-json": (
        lambda r: (train_pair(r), write(r, f"CIFAR10/train/{NAME}.json", b"\xef\xbb\xbf" + (r / f"CIFAR10/train/{NAME}.json").read_bytes())),
        ".json",
        "file.bom",
    ),
    "crlf": (lambda r: train_pair(r, tsv=CIFAR_TSV.replace("\n", "\r\n")), ".tsv", "file.crlf"),
    "column-order": (lambda r: train_pair(r, tsv="hours\ttop1Accuracy\tepoch\n0.01\t80.5\t1\n0.02\t91\t2\n0.03\t94.2\t3\n"), ".tsv", "tsv.column-order"),
    "date-not-padded": (lambda r: train_pair(r, timestamp="2018-4-20"), ".json", "json.date-not-padded"),
    "null-price": (lambda r: train_pair(r, costPerHour=None), ".json", "json.null-price"),
    "misc-string": (lambda r: train_pair(r, misc="CUDA 9; batch 512"), ".json", "json.misc-string"),
    "extra-fields": (lambda r: train_pair(r, usedBlacklist=True, commitHash="abc123"), ".json", "json.extra-field"),
    "repeated-epoch": (lambda r: train_pair(r, tsv=CIFAR_TSV + "4\t0.045\t94.6\n"), ".tsv", "log.epoch-repeat"),
    "blank-line": (lambda r: train_pair(r, tsv=CIFAR_TSV.replace("\n2\t", "\n\n2\t")), ".tsv", "tsv.blank-lines"),
    "padded-cells": (lambda r: train_pair(r, tsv=CIFAR_TSV.replace("\t0.02\t", "\t  0.02   \t")), ".tsv", "tsv.padded-cells"),
    "extra-column": (
        lambda r: train_pair(
            r,
            tsv=CIFAR_TSV.replace("top1Accuracy\n", "top1Accuracy\tloss\n")
            .replace("80.5\n", "80.5\t1.2\n")
            .replace("91.0\n", "91.0\t0.9\n")
            .replace("94.2\n", "94.2\t0.5\n")
            .replace("94.5\n", "94.5\t0.4\n"),
        ),
        ".tsv",
        "tsv.extra-column",
    ),
}


@pytest.mark.parametrize("quirk", sorted(QUIRKS))
def test_harmless_quirk_is_a_warning_and_changes_no_figure(tmp_path, quirk):
    make, suffix, code = QUIRKS[quirk]
    make(tmp_path)
    report = run(tmp_path)
    found = codes(report, suffix)
    assert found.get(code) == "warning", f"{quirk}: {messages(report, suffix)}"
    assert report.exit_code == 0, [f.lines() for f in report.files]
    sub = submission(report, NAME)
    assert sub.valid and sub.figures["hours_to_threshold"] == 0.03


def test_fractional_epochs_are_not_even_a_warning(tmp_path):
    train_pair(tmp_path, tsv="epoch\thours\ttop1Accuracy\n0.5\t0.01\t80\n1.00096\t0.02\t90\n1.5\t0.025\t94.1\n")
    report = run(tmp_path)
    assert [f.status for f in report.files] == ["ok", "ok"]
    assert submission(report, NAME).figures["epochs_to_threshold"] == 1.5


def test_part2_log_is_audited_on_its_own_with_a_warning(tmp_path):
    train_pair(tmp_path)
    train_pair(tmp_path, name=f"{NAME}_part2", tsv=CIFAR_TSV.replace("0.03\t94.2", "0.031\t94.2"))
    report = run(tmp_path)
    assert codes(report, f"{NAME}_part2.json")["submission.part"] == "warning"
    assert submission(report, f"{NAME}_part2").valid
    assert report.exit_code == 0


def test_json_and_tsv_of_the_real_corpus_shapes_are_read(tmp_path):
    """Whitespace-padded hours and f1Score before hours, as in SQuAD/train/dawn_drqa_1k80-ec2.tsv."""
    tsv = "epoch\tf1Score\thours\n1\t0.61\t  0.13     \n2\t0.7584\t  0.27     "
    train_pair(tmp_path, task="SQuAD", tsv=tsv)
    report = run(tmp_path)
    assert report.exit_code == 0
    assert submission(report, NAME).figures["hours_to_threshold"] == 0.27


# ------------------------------------------------------------------- errors
ERRORS = {
    "invalid-json": (lambda r: (train_pair(r), write(r, f"CIFAR10/train/{NAME}.json", '{"version": "v1.0",')), ".json", "json.invalid"),
    "json-not-object": (lambda r: (train_pair(r), write(r, f"CIFAR10/train/{NAME}.json", "[1, 2]")), ".json", "json.not-object"),
    "nan-in-json": (lambda r: (train_pair(r), write(r, f"CIFAR10/train/{NAME}.json", '{"costPerHour": NaN}')), ".json", "json.invalid"),
    "duplicate-field": (
        lambda r: (
            train_pair(r),
            write(r, f"CIFAR10/train/{NAME}.json", (r / f"CIFAR10/train/{NAME}.json").read_text()[:-2] + ',\n  "author": "Someone Else"\n}'),
        ),
        ".json",
        "json.duplicate-field",
    ),
    "missing-field": (lambda r: train_pair(r, author=DROP), ".json", "json.missing-field"),
    "null-required": (lambda r: train_pair(r, hardware=None), ".json", "json.missing-field"),
    "empty-author": (lambda r: train_pair(r, author=""), ".json", "json.check"),
    "price-as-string": (lambda r: train_pair(r, costPerHour="3.06"), ".json", "json.type"),
    "author-as-number": (lambda r: train_pair(r, author=42), ".json", "json.type"),
    "negative-price": (lambda r: train_pair(r, costPerHour=-1.0), ".json", "json.check"),
    "huge-number": (
        lambda r: (train_pair(r), write(r, f"CIFAR10/train/{NAME}.json", (r / f"CIFAR10/train/{NAME}.json").read_text().replace("3.06", "1e999"))),
        ".json",
        "json.not-finite",
    ),
    "bad-date": (lambda r: train_pair(r, timestamp="2018-02-30"), ".json", "json.check"),
    "date-words": (lambda r: train_pair(r, timestamp="April 20, 2018"), ".json", "json.check"),
    "bad-version": (lambda r: train_pair(r, version="v2.0"), ".json", "json.check"),
    "missing-column": (lambda r: train_pair(r, tsv="epoch\ttop1Accuracy\n1\t95\n"), ".tsv", "tsv.missing-column"),
    "not-tab-separated": (lambda r: train_pair(r, tsv="epoch,hours,top1Accuracy\n1,0.1,95\n"), ".tsv", "tsv.not-tab-separated"),
    "not-a-number": (lambda r: train_pair(r, tsv=CIFAR_TSV.replace("0.02", "two")), ".tsv", "tsv.not-a-number"),
    "no-hours-at-threshold": (lambda r: train_pair(r, tsv=CIFAR_TSV.replace("0.03", "n/a")), ".tsv", "tsv.not-a-number"),
    "nan-cell": (lambda r: train_pair(r, tsv=CIFAR_TSV.replace("0.02", "nan")), ".tsv", "tsv.not-a-number"),
    "missing-cell": (lambda r: train_pair(r, tsv=CIFAR_TSV.replace("\t0.02\t", "\t\t")), ".tsv", "tsv.check"),
    "ragged-row": (lambda r: train_pair(r, tsv=CIFAR_TSV.replace("2\t0.02\t91.0", "2\t0.02")), ".tsv", "tsv.ragged-row"),
    "accuracy-over-100": (lambda r: train_pair(r, tsv=CIFAR_TSV.replace("91.0", "104.2")), ".tsv", "tsv.check"),
    "negative-hours": (lambda r: train_pair(r, tsv=CIFAR_TSV.replace("0.01", "-0.01")), ".tsv", "tsv.check"),
    "hours-decrease-before-threshold": (lambda r: train_pair(r, tsv=CIFAR_TSV.replace("2\t0.02", "2\t0.005")), ".tsv", "log.hours-decrease"),
    "empty-tsv": (lambda r: train_pair(r, tsv=""), ".tsv", "tsv.empty"),
    "header-only": (lambda r: train_pair(r, tsv="epoch\thours\ttop1Accuracy\n"), ".tsv", "tsv.no-epochs"),
    "duplicate-column": (lambda r: train_pair(r, tsv="epoch\thours\thours\ttop1Accuracy\n1\t1\t1\t95\n"), ".tsv", "tsv.duplicate-column"),
    "binary": (lambda r: train_pair(r, tsv=b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), ".tsv", "file.binary"),
    "utf16": (lambda r: train_pair(r, tsv=("\ufeff" + CIFAR_TSV).encode("utf-16-le")), ".tsv", "file.utf16"),
    "latin1": (lambda r: train_pair(r, tsv="epoch\thours\ttop1Accuracy\n1\t0.1\t95\xe9\n".encode("latin-1")), ".tsv", "file.not-utf8"),
    "tsv-without-json": (lambda r: write(r, f"CIFAR10/train/{NAME}.tsv", CIFAR_TSV), ".tsv", "submission.no-metadata"),
    "json-without-tsv": (lambda r: write(r, f"CIFAR10/train/{NAME}.json", train_meta()), ".json", "submission.no-log"),
    "claim-disagrees": (lambda r: train_pair(r, misc={"dawnpipe": {"timeToAccuracyHours": 0.02, "threshold": 94.0}}), ".json", "claim.disagrees"),
    "implausible-hours": (lambda r: train_pair(r, tsv=CIFAR_TSV.replace("0.04", "1e9")), ".tsv", "log.implausible-hours"),
}


# Where each error is placed: the field, the line (and column), or the whole file.
ERROR_PLACES = {
    "accuracy-over-100": "line 3, column top1Accuracy",
    "author-as-number": "field author",
    "bad-date": "field timestamp",
    "bad-version": "field version",
    "binary": "file",
    "claim-disagrees": "field misc.dawnpipe.timeToAccuracyHours",
    "date-words": "field timestamp",
    "duplicate-column": "line 1",
    "duplicate-field": "field author",
    "empty-author": "field author",
    "empty-tsv": "file",
    "header-only": "file",
    "hours-decrease-before-threshold": "line 3",
    "huge-number": "field costPerHour",
    "implausible-hours": "line 5, column hours",
    "invalid-json": "line 1, column 20",
    "json-not-object": "file",
    "json-without-tsv": "file",
    "latin1": "file",
    "missing-cell": "line 3, column hours",
    "missing-column": "line 1",
    "missing-field": "field author",
    "nan-cell": "line 3, column hours",
    "nan-in-json": "file",
    "negative-hours": "line 2, column hours",
    "negative-price": "field costPerHour",
    "no-hours-at-threshold": "line 4, column hours",
    "not-a-number": "line 3, column hours",
    "not-tab-separated": "line 1",
    "null-required": "field hardware",
    "price-as-string": "field costPerHour",
    "ragged-row": "line 3",
    "tsv-without-json": "file",
    "utf16": "file",
    "too-deep": "file",
    "implausible-latency": "field latency",
    "implausible-cost": "field cost",
    "implausible-price": "field costPerHour",
}
ERRORS.update(
    {
        "too-deep": (lambda r: (train_pair(r), write(r, f"CIFAR10/train/{NAME}.json", "[" * 100_000 + "]" * 100_000)), ".json", "json.too-deep"),
        "implausible-latency": (
            lambda r: write(r, f"CIFAR10/inference/{NAME}.json", inference_meta(latency=4e6, cost=DROP)),
            ".json",
            "json.implausible-latency",
        ),
        "implausible-cost": (lambda r: write(r, f"CIFAR10/inference/{NAME}.json", inference_meta(cost=500.0, latency=DROP)), ".json", "json.implausible-cost"),
        "implausible-price": (lambda r: train_pair(r, costPerHour=2e5), ".json", "json.implausible-price"),
    }
)


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_wrong_data_is_an_error_naming_file_place_and_reason(tmp_path, case):
    make, suffix, code = ERRORS[case]
    make(tmp_path)
    report = run(tmp_path)
    found = codes(report, suffix)
    assert found.get(code) == "error", f"{case}: {messages(report, suffix)}"
    assert report.exit_code == 1
    sub = report.submissions[0]
    assert not sub.valid
    assert [m.where for m in messages(report, suffix) if m.code == code] == [ERROR_PLACES[case]]
    for f in report.files:
        for line in f.lines():
            assert line.startswith(str(tmp_path)) and len(line) > len(f.path) + 5  # the file, then where and why


def test_a_row_check_is_reported_once_not_once_per_column(tmp_path):
    write(tmp_path, "CIFAR10/inference/x.json", inference_meta(latency=None, cost=None))
    found = [m for m in messages(run(tmp_path), "x.json") if m.where == "fields latency, cost"]
    assert len(found) == 1 and "neither latency nor cost" in found[0].text


def test_epoch_decreasing_is_a_warning_when_the_time_is_still_defined(tmp_path):
    train_pair(tmp_path, tsv=CIFAR_TSV + "3.5\t0.05\t94.7\n")
    report = run(tmp_path)
    (m,) = [m for m in messages(report, ".tsv") if m.code == "log.epoch-decrease"]
    assert m.severity == "warning" and m.where == "line 6" and "4 -> 3.5" in m.text and "still well defined" in m.text
    assert report.exit_code == 0 and submission(report, NAME).figures["hours_to_threshold"] == 0.03


@pytest.mark.parametrize(
    "make, suffix, code, where",
    [
        (lambda r: train_pair(r, tsv="epoch\thours\ttop1Accuracy\n1\t0\t95\n"), ".tsv", "log.zero-time", "line 2"),
        (lambda r: train_pair(r, misc=[1, 2]), ".json", "json.misc-type", "field misc"),
        (lambda r: train_pair(r, tsv=CIFAR_TSV.replace("epoch\thours", " epoch \thours ")), ".tsv", "tsv.padded-header", "line 1"),
    ],
)
def test_doubtful_points_are_warnings_naming_the_place(tmp_path, make, suffix, code, where):
    make(tmp_path)
    report = run(tmp_path)
    found = [m for m in messages(report, suffix) if m.code == code]
    assert [(m.severity, m.where) for m in found] == [("warning", where)], messages(report, suffix)
    assert report.exit_code == 0


def test_f1_in_percent_is_flagged_as_such(tmp_path):
    train_pair(tmp_path, task="SQuAD", tsv="epoch\thours\tf1Score\n1\t0.5\t61.2\n2\t1.0\t76.1\n")
    report = run(tmp_path)
    (m,) = [m for m in messages(report, ".tsv") if m.code == "tsv.check"]
    assert m.severity == "error" and "percent" in m.text and m.where == "lines 2, 3, column f1Score"


def test_inference_f1_given_as_a_percentage_is_read_as_one_and_ranked(tmp_path):
    """The published DAWNBench leaderboard ranked an F1 given as 75.8: a
    warning says how it was read, and the submission stays rankable."""
    write(tmp_path, "SQuAD/inference/x.json", inference_meta("SQuAD", f1Score=75.8))
    report = run(tmp_path)
    (m,) = [m for m in messages(report, "x.json") if m.where == "field f1Score"]
    assert (m.severity, m.code) == ("warning", "inference.percent-not-fraction")
    assert m.text == "75.8 is a percentage, not a fraction 0..1: read as 0.758 (harmless; ranked)"
    sub = submission(report, "x")
    assert sub.valid and not sub.notes and sub.figures["accuracy"] == pytest.approx(0.758)
    rows, excluded = submission_rows(report)
    assert [r["objective"] for r in rows] == ["inference_latency", "inference_cost"] and not excluded
    # below the threshold once read as a percentage: measured, not ranked
    write(tmp_path, "SQuAD/inference/x.json", inference_meta("SQuAD", f1Score=70.0))
    sub = submission(run(tmp_path), "x")
    assert sub.notes and "0.7000 is below the threshold 0.7500" in sub.notes[0]
    # beyond 100 it is no percentage either: an error
    write(tmp_path, "SQuAD/inference/x.json", inference_meta("SQuAD", f1Score=175.8))
    (m,) = [m for m in messages(run(tmp_path), "x.json") if m.where == "field f1Score"]
    assert (m.severity, m.text) == ("error", "175.8 is above 1")


def test_accuracy_given_as_a_fraction_is_a_warning_and_does_not_converge(tmp_path):
    train_pair(tmp_path, tsv="epoch\thours\ttop1Accuracy\n1\t0.1\t0.90\n2\t0.2\t0.95\n")
    report = run(tmp_path)
    found = codes(report, ".tsv")
    assert found["log.fraction-not-percent"] == "warning" and found["log.not-reached"] == "warning"


def test_hours_decreasing_after_the_threshold_is_a_warning(tmp_path):
    train_pair(tmp_path, tsv=CIFAR_TSV + "5\t0.035\t94.6\n")
    report = run(tmp_path)
    assert codes(report, ".tsv")["log.hours-decrease"] == "warning"
    assert submission(report, NAME).figures["hours_to_threshold"] == 0.03


def test_repeated_hours_are_a_warning(tmp_path):
    train_pair(tmp_path, tsv=CIFAR_TSV.replace("2\t0.02", "2\t0.01"))
    assert codes(run(tmp_path), ".tsv")["log.hours-repeat"] == "warning"


def test_threshold_never_reached_is_a_warning_and_not_ranked(tmp_path):
    train_pair(tmp_path, tsv=CIFAR_TSV.replace("94.2", "93.9").replace("94.5", "93.99"))
    report = run(tmp_path)
    m = [m for m in messages(report, ".tsv") if m.code == "log.not-reached"][0]
    assert m.severity == "warning" and "93.99%" in m.text and "94.00%" in m.text
    sub = submission(report, NAME)
    assert sub.valid and sub.notes and report.exit_code == 0


def test_a_threshold_met_exactly_counts(tmp_path):
    train_pair(tmp_path, tsv="epoch\thours\ttop1Accuracy\n1\t0.5\t94\n")
    assert submission(run(tmp_path), NAME).figures["hours_to_threshold"] == 0.5


def test_identical_logs_under_two_names(tmp_path):
    train_pair(tmp_path, name="first", timestamp="2018-01-01")
    train_pair(tmp_path, name="copy", timestamp="2018-05-01")
    report = run(tmp_path)
    assert codes(report, "first.tsv")["log.duplicate"] == "warning"
    assert codes(report, "copy.tsv")["log.duplicate"] == "error"
    assert "first.tsv" in [m for m in messages(report, "copy.tsv") if m.code == "log.duplicate"][0].text


def test_claims_that_agree_with_the_log_pass(tmp_path):
    train_pair(tmp_path, misc={"dawnpipe": {"timeToAccuracyHours": 0.02, "epochsToAccuracy": 2, "threshold": 90.0}})
    report = run(tmp_path)
    assert report.exit_code == 0, [f.lines() for f in report.files]


def test_unknown_task_directory_and_stray_files(tmp_path):
    write(tmp_path, "MNIST/train/x.json", train_meta())
    write(tmp_path, "cifar10/train/x.json", train_meta())
    write(tmp_path, "CIFAR10/train/notes.txt", "hello")
    write(tmp_path, "README.md", "# entries")
    report = run(tmp_path)
    assert codes(report, "MNIST/train/x.json")["file.unknown-task"] == "warning"
    assert "did you mean 'CIFAR10'" in messages(report, "cifar10/train/x.json")[0].text
    assert codes(report, "notes.txt")["file.not-a-submission"] == "warning"
    assert report.skipped == 1  # README.md


# ---------------------------------------------------------------- inference
def test_inference_cost_per_10k_and_implied_price(tmp_path):
    write(tmp_path, "CIFAR10/inference/x.json", inference_meta())
    report = run(tmp_path)
    assert report.files[0].status == "ok"
    fig = report.submissions[0].figures
    # cost 2 ms x 3.06 USD/h = 2/3.6e6 h x 3.06 = 1.7e-6 USD per item
    assert fig["cost_per_10k_usd"] == pytest.approx(0.017)
    assert fig["implied_price_per_hour"] == pytest.approx(3.06)


@pytest.mark.parametrize(
    "over, code, severity",
    [
        ({"top1Accuracy": 93.9}, "inference.below-threshold", "warning"),
        ({"cost": 1.7e-2}, "inference.implausible-price", "warning"),  # cost per 10,000 given as per item
        ({"latency": None, "cost": None}, "json.check", "error"),
        ({"latency": -1.0}, "json.check", "error"),
        ({"top1Accuracy": DROP}, "json.missing-field", "error"),
        ({"costPerHour": 3.06, "cost": 1e-3}, "claim.disagrees", "error"),
        ({"misc": {"dawnpipe": {"items": 500}}}, "inference.partial-set", "warning"),
        ({"latency": "2 ms"}, "json.type", "error"),
    ],
)
def test_inference_checks(tmp_path, over, code, severity):
    write(tmp_path, "CIFAR10/inference/x.json", inference_meta(**over))
    report = run(tmp_path)
    assert codes(report, "x.json").get(code) == severity, messages(report, "x.json")


def test_inference_with_only_latency_or_only_cost(tmp_path):
    write(tmp_path, "CIFAR10/inference/lat.json", inference_meta(cost=DROP))
    write(tmp_path, "CIFAR10/inference/cost.json", inference_meta(latency=DROP))
    report = run(tmp_path)
    assert report.exit_code == 0
    assert "cost_per_10k_usd" not in submission(report, "lat").figures
    assert "latency_ms" not in submission(report, "cost").figures
    assert submission(report, "cost").figures["cost_per_10k_usd"] == pytest.approx(0.017)


def test_inference_accuracy_given_as_a_fraction_gets_a_hint(tmp_path):
    write(tmp_path, "CIFAR10/inference/x.json", inference_meta(top1Accuracy=0.945))
    (m,) = [m for m in messages(run(tmp_path), "x.json") if m.code == "inference.below-threshold"]
    assert m.severity == "warning" and "given as a fraction? top1Accuracy is a percentage" in m.text


def test_wrong_accuracy_field_for_the_task(tmp_path):
    write(tmp_path, "ImageNet/inference/x.json", inference_meta("CIFAR10"))  # top1 where ImageNet needs top5
    report = run(tmp_path)
    found = codes(report, "x.json")
    assert found["json.missing-field"] == "error" and found["json.extra-field"] == "warning"


def test_figures_are_finite_or_absent(tmp_path):
    train_pair(tmp_path, tsv="epoch\thours\ttop1Accuracy\n1\t\t95\n")
    report = run(tmp_path)
    for sub in report.submissions:
        for v in sub.figures.values():
            assert not (isinstance(v, float) and not math.isfinite(v))


HUGE = 10**400  # JSON allows it; Python reads it exactly, and float() of it raises OverflowError


@pytest.mark.parametrize(
    "make, suffix, code, where",
    [
        (lambda r: write(r, "CIFAR10/inference/x.json", inference_meta(latency=HUGE)), "x.json", "json.not-finite", "field latency"),
        (lambda r: train_pair(r, costPerHour=HUGE), ".json", "json.not-finite", "field costPerHour"),
        (lambda r: train_pair(r, misc={"dawnpipe": {"timeToAccuracyHours": HUGE}}), ".json", "claim.type", "field misc.dawnpipe.timeToAccuracyHours"),
        (lambda r: train_pair(r, misc={"dawnpipe": {"timeToAccuracyHours": 0.03, "threshold": HUGE}}), ".json", "claim.type", "field misc.dawnpipe.threshold"),
    ],
    ids=["inference-latency", "train-price", "claimed-time", "claimed-threshold"],
)
def test_a_whole_number_too_large_for_a_float_is_an_error_not_a_crash(tmp_path, make, suffix, code, where):
    """Read as the infinity a float that large would be (1e400 already was):
    an error on its field, the audit goes on (it stopped with exit 70)."""
    make(tmp_path)
    report = run(tmp_path)
    found = [m for m in messages(report, suffix) if m.code == code]
    assert found and found[0].severity == "error" and found[0].where == where, messages(report, suffix)
    assert report.exit_code == 1
