"""`dawnpipe audit` as a user runs it (a real subprocess): exit codes, the
terminal summary, --json and --parquet, and the security requirements: no
fetching or opening of anything a submission names, size caps with bounded
memory, no following of links out of the audited directory, no blocking on
FIFOs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pandas as pd
import pytest
from conftest import run_cli, tool_env
from submission_factory import CIFAR_TSV, inference_meta, train_meta, train_pair, write


def test_exit_0_and_a_summary_table_when_nothing_is_wrong(tmp_path):
    train_pair(tmp_path, timestamp="2018-4-20")  # a warning does not fail the audit
    proc = run_cli("audit", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert f"{tmp_path}/CIFAR10/train/team_resnet9_1v100_pytorch.json: field timestamp: warning: '2018-4-20' is not zero-padded" in out
    assert "ok       CIFAR10/train/team_resnet9_1v100_pytorch.tsv" in out and "0:01:48 to 94.00% (epoch 3, line 4)" in out
    assert out.rstrip().endswith("audit: 2 files: 1 ok, 1 with warnings, 0 with errors")


def test_exit_1_with_every_error_naming_file_place_and_reason(tmp_path):
    train_pair(tmp_path, tsv=CIFAR_TSV.replace("91.0", "abc"), costPerHour="3.06")
    proc = run_cli("audit", str(tmp_path))
    assert proc.returncode == 1
    assert f"{tmp_path}/CIFAR10/train/team_resnet9_1v100_pytorch.tsv: line 3, column top1Accuracy: error: 'abc' is not a number" in proc.stdout
    assert f"{tmp_path}/CIFAR10/train/team_resnet9_1v100_pytorch.json: field costPerHour: error: expected a number, got a string '3.06'" in proc.stdout
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args, text",
    [
        ([], "the following arguments are required"),
        (["/nonexistent/entries"], "no such file or directory"),
        (["--max-bytes", "0", "."], "--max-bytes must be a positive number"),
        (["{empty}"], "no DAWNBench submission files"),
    ],
)
def test_usage_errors_exit_2(tmp_path, args, text):
    (tmp_path / "empty").mkdir()
    proc = run_cli("audit", *[a.format(empty=tmp_path / "empty") for a in args])
    assert proc.returncode == 2 and text in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_json_and_parquet_outputs(tmp_path):
    train_pair(tmp_path)
    write(tmp_path, "CIFAR10/inference/x.json", inference_meta(top1Accuracy=90.0))
    write(tmp_path, "CIFAR10/train/orphan.tsv", CIFAR_TSV.replace("80.5", "80.4"))
    out = tmp_path / "out"
    proc = run_cli("audit", str(tmp_path / "CIFAR10"), "--json", str(out / "audit.json"), "--parquet", str(out / "audit.parquet"))
    assert proc.returncode == 1
    doc = json.loads((out / "audit.json").read_text())
    assert doc["summary"] == {"files": 4, "ok": 2, "warning": 1, "error": 1, "skipped": 0, "exit_code": 1}
    by_source = {f["source"]: f for f in doc["files"]}
    assert by_source["CIFAR10/train/orphan.tsv"]["messages"][0]["code"] == "submission.no-metadata"
    subs = {s["source"]: s for s in doc["submissions"]}
    assert subs["CIFAR10/train/team_resnet9_1v100_pytorch.json"]["figures"]["hours_to_threshold"] == 0.03
    assert subs["CIFAR10/inference/x.json"]["rankable"] is False
    table = pd.read_parquet(out / "audit.parquet")
    assert set(table["status"]) == {"ok", "warning", "error"}
    assert (table.loc[table["code"] == "submission.no-metadata", "path"].str.endswith("orphan.tsv")).all()
    assert table["severity"].isna().sum() == 2  # the two files without messages still have a row


def test_single_files_can_be_audited(tmp_path):
    j, _ = train_pair(tmp_path)
    proc = run_cli("audit", str(j))
    assert proc.returncode == 1  # a training JSON given alone lacks its log
    assert "no training log team_resnet9_1v100_pytorch.tsv beside it" in proc.stdout


# ------------------------------------------------------------------- security
def test_a_100_mb_log_is_rejected_without_reading_it(tmp_path):
    """Bounded memory: the auditor's peak memory with a 100 MB TSV is that of
    an audit of a tiny one (the file is sparse, so the test costs no disk)."""
    train_pair(tmp_path / "small")
    big_json, big_tsv = train_pair(tmp_path / "big")
    with open(big_tsv, "r+b") as f:
        f.truncate(100 * 1024 * 1024)
    probe = textwrap.dedent("""
        import resource, sys
        from dawnpipe.cli import main
        try:
            main(["audit", sys.argv[1]])
        except SystemExit as e:
            code = e.code
        print(code, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
    """)

    def peak(root):
        proc = subprocess.run([sys.executable, "-c", probe, str(root)], env=tool_env(), capture_output=True, text=True, timeout=120)
        code, kib = proc.stderr.split()[-2:]
        return int(code), int(kib), proc.stdout

    code_small, kib_small, _ = peak(tmp_path / "small")
    code_big, kib_big, out = peak(tmp_path / "big")
    assert code_small == 0 and code_big == 1
    assert "104,857,600 bytes, over the size cap of 4,194,304 bytes; not read" in out
    assert kib_big - kib_small < 30 * 1024, (kib_small, kib_big)


def test_size_cap_is_configurable(tmp_path):
    train_pair(tmp_path)
    proc = run_cli("audit", str(tmp_path), "--max-bytes", "50")
    assert proc.returncode == 1 and "over the size cap of 50 bytes" in proc.stdout


def test_plausible_ranges_are_configurable_with_a_rules_file(tmp_path):
    entries = tmp_path / "entries"
    write(entries, "CIFAR10/inference/x.json", inference_meta())  # implies 3.06 USD/h
    assert run_cli("audit", str(entries)).returncode == 0
    rules = tmp_path / "strict.yaml"
    rules.write_text("plausible:\n  price_per_hour_usd: {min: 0.01, max: 2.0}  # our cloud's range\n")
    proc = run_cli("audit", str(entries), "--rules", str(rules))
    assert proc.returncode == 0  # a doubtful figure is a warning, not an error
    assert ("fields cost, latency: warning: imply 3.06 USD per hour (cost / latency in hours), outside the plausible 0.01..2") in proc.stdout


@pytest.mark.parametrize(
    "content, text",
    [
        ("plausible:\n  price_per_hour: 3\n", "field 'plausible.price_per_hour': not an audit rule"),
        ("limits:\n  max_listed: many\n", "field 'limits.max_listed': expected a whole number >= 1, got str 'many'"),
        ("limits:\n  max_listed: 2.5\n", "field 'limits.max_listed': expected a whole number >= 1, got float 2.5"),
        ("limits:\n  max_json_bytes: true\n", "field 'limits.max_json_bytes': expected a whole number >= 1, got bool True"),
        ("plausible:\n  max_hours: .nan\n", "field 'plausible.max_hours': not a finite number (NaN or infinity)"),
        ("limits: 5\n", "field 'limits': expected a mapping of rules, got int 5"),
        ("claims: [{field: x, recomputed: speed}]\n", "field 'claims.0.recomputed': expected one of hours_to_threshold, epochs_to_threshold"),
    ],
)
def test_a_bad_rules_file_is_named_with_the_key(tmp_path, content, text):
    train_pair(tmp_path / "entries")
    rules = tmp_path / "rules.yaml"
    rules.write_text(content)
    proc = run_cli("audit", str(tmp_path / "entries"), "--rules", str(rules))
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    (line,) = proc.stderr.splitlines()
    assert f"{rules}: {text}" in line


def test_no_figure_is_shown_from_a_log_with_errors(tmp_path):
    train_pair(tmp_path, tsv=CIFAR_TSV.replace("94.2", "200"))
    proc = run_cli("audit", str(tmp_path))
    assert proc.returncode == 1 and "200 is above 100" in proc.stdout
    (row,) = [line for line in proc.stdout.splitlines() if line.startswith("error ") and line.rstrip().endswith("]")]
    assert "not recomputed (errors)" in row and "to 94.00%" not in row


def test_fifo_and_links_out_of_the_directory_are_not_opened(tmp_path):
    """A FIFO would block a reader forever; a link could point at any file."""
    root = tmp_path / "entries"
    train_pair(root, name="fifo")
    (root / "CIFAR10/train/fifo.tsv").unlink()
    os.mkfifo(root / "CIFAR10/train/fifo.tsv")
    secret = tmp_path / "secret.tsv"
    secret.write_text(CIFAR_TSV)
    write(root, "CIFAR10/train/link.json", train_meta())
    os.symlink(secret, root / "CIFAR10/train/link.tsv")
    os.symlink("/dev/zero", root / "CIFAR10/train/zero.tsv")
    write(root, "CIFAR10/train/zero.json", train_meta())
    proc = run_cli("audit", str(root), timeout=60)
    assert proc.returncode == 1
    assert "fifo.tsv: error: not a regular file" in proc.stdout
    assert f"link.tsv: error: symbolic link to {secret}, outside the audited directory; not opened" in proc.stdout
    assert "zero.tsv: error: symbolic link to /dev/zero" in proc.stdout


def test_nothing_a_submission_names_is_fetched_or_opened(tmp_path):
    """codeURL and logFilename point at a listening local socket and at a FIFO
    outside the directory: a fetch would connect, an open would block."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.setblocking(False)
    url = f"http://127.0.0.1:{server.getsockname()[1]}/log.tsv"
    fifo = tmp_path / "outside.log"
    os.mkfifo(fifo)
    root = tmp_path / "entries"
    train_pair(root, name="a", codeURL=url, logFilename=url)
    train_pair(root, name="b", tsv=CIFAR_TSV.replace("94.2", "94.25"), logFilename=f"../../../{fifo.name}", codeURL=str(fifo))
    write(root, "CIFAR10/inference/c.json", inference_meta(logFilename=f"file://{fifo}", codeURL="javascript:alert(1)"))
    try:
        proc = run_cli("audit", str(root), timeout=60)
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody connected
    finally:
        server.close()
    assert proc.returncode == 0, proc.stdout
    out = proc.stdout
    assert "b.json: field logFilename: warning: '../../../outside.log' points outside the submission" in out
    assert f"b.json: field codeURL: warning: '{str(fifo)[:40]}..." in out  # long values are cut short
    assert "c.json: field logFilename: warning:" in out and "c.json: field codeURL: warning: 'javascript:alert(1)' is not an http(s) URL" in out


def test_non_utf8_file_names_and_text_print_safely(tmp_path):
    root = tmp_path / "entries"
    train_pair(root, author="\udcff bad \ud800")  # lone surrogates, written as JSON escapes
    name = os.fsencode(root / "CIFAR10" / "train") + b"/caf\xe9.json"
    with open(name, "wb") as f:
        f.write(json.dumps(train_meta()).encode())
    proc = run_cli("audit", str(root))
    assert proc.returncode == 1  # caf\xe9.json has no log
    assert "caf\\xe9.json" in proc.stdout and "Traceback" not in proc.stderr


def test_audit_stays_light(tmp_path):
    """`dawnpipe audit` imports neither torch nor tensorflow nor the HTML stack."""
    train_pair(tmp_path)
    probe = (
        "import sys; from dawnpipe.cli import main\ntry:\n    main(['audit', sys.argv[1]])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('torch', 'tensorflow', 'jinja2') if m in sys.modules), file=sys.stderr)"
    )
    proc = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], env=tool_env(), capture_output=True, text=True, timeout=120)
    assert proc.stderr.strip().splitlines()[-1] == "[]", proc.stderr
