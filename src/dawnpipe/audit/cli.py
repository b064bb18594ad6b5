"""audit: a verdict for every file of DAWNBench v1 submissions.

    python -m dawnpipe audit ../shared/dawnbench-entries [more paths] \\
        [--json audit.json] [--parquet audit.parquet] [--max-bytes N] [--rules RULES.yaml] [--verbose]

PATH is a directory laid out like the public entries repository
(``<Task>/train/<name>.json + .tsv``, ``<Task>/inference/<name>.json``), a
part of one, or single files. Prints every warning and error as
``file: field or line: severity: reason``, then a table of all files with
what the audit recomputed. Exit code 0 when no file has an error, 1 when
some do, 2 for a usage error.
"""

from __future__ import annotations

import sys
from pathlib import Path

from dawnpipe.audit.rules import add_arguments, rules_from_args
from dawnpipe.errors import UsageError


def configure(p) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="submission directories or files")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write every verdict, message and figure as JSON")
    p.add_argument("--parquet", type=Path, metavar="FILE", help="also write one row per message as Parquet")
    add_arguments(p, positionals=True)
    p.add_argument("--verbose", "-v", action="store_true", help="also print notes (info) that do not change a status")


def run(args) -> int:
    rules = rules_from_args(args)
    if hasattr(sys.stdout, "reconfigure"):  # submissions may hold any text; printing must not fail
        sys.stdout.reconfigure(errors="backslashreplace")
    from dawnpipe.audit.core import audit
    from dawnpipe.audit.output import as_json, message_table, terminal
    from dawnpipe.fileio import write_json, write_parquet

    report = audit(args.paths, rules)
    if not report.files:
        raise UsageError(
            f"no DAWNBench submission files under {', '.join(args.paths)} (expected <Task>/train/<name>.json + .tsv or <Task>/inference/<name>.json)"
        )
    sys.stdout.write(terminal(report, verbose=args.verbose))
    if args.json:
        write_json(args.json, as_json(report, [str(p) for p in args.paths]))
    if args.parquet:
        write_parquet(args.parquet, message_table(report))
    return report.exit_code
