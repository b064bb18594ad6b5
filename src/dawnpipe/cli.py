"""Command-line entry point: ``dawnpipe <command> [args]``.

Each command lives in its own module with ``configure(parser)`` and
``run(args) -> int | None``. Modules are imported only when their command is
called, so ``dawnpipe audit`` does not pay for importing torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from dawnpipe.crash import crash_report
from dawnpipe.display import terminal_safe
from dawnpipe.errors import DawnpipeError, UsageError, missing_package

# command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "fetch": ("dawnpipe.data.fetch", "download or copy a task's raw data and verify its checksums"),
    "dawnbench": ("dawnpipe.data.dawnbench", "fetch the public DAWNBench entries repository's archive, verify it and unpack it safely"),
    "prepare": ("dawnpipe.data.prepare", "decode raw data into memory-mappable uint8 arrays + manifest"),
    "fetch-program": ("dawnpipe.data.fetch_program", "check a program entry's repository out at its pinned commit (program.source)"),
    "train": ("dawnpipe.train.cli", "train one entry with one seed; per-epoch TSV/Parquet log"),
    "extract": ("dawnpipe.metrics.extract", "time-to-accuracy, epochs and cost of one run"),
    "infer": ("dawnpipe.infer.cli", "one-item-at-a-time inference latency and cost of a run"),
    "stability": ("dawnpipe.metrics.stability", "coefficient of variation of time-to-accuracy over seeds"),
    "flops": ("dawnpipe.metrics.flops", "model FLOPs and operand bytes per item of one training step (once per entry)"),
    "utilization": ("dawnpipe.metrics.utilization", "achieved FLOP/s, fraction of peak and energy to accuracy of a run"),
    "sensitivity": ("dawnpipe.metrics.sensitivity", "time to accuracy of a run at a ladder of thresholds"),
    "report": ("dawnpipe.report.build", "leaderboard JSON, HTML and the table of all runs"),
    "squad-eval": ("dawnpipe.squad.evaluate", "exact match and F1 of SQuAD v1.1 predictions, like the official script"),
    "audit": ("dawnpipe.audit.cli", "check DAWNBench v1 submissions: a verdict and reasons for every file"),
    "leaderboard": ("dawnpipe.report.board", "rank audited submissions together with our own runs (JSON, HTML)"),
    "study": ("dawnpipe.report.study", "a study's variants, or its results as JSON and a page (config/studies/<name>.yaml)"),
    "mlperf": ("dawnpipe.mlperf.cli", "score and check MLPerf Training results as MLCommons' mlperf-logging does"),
    "export": ("dawnpipe.export", "write our runs as DAWNBench v1 submissions (train JSON + TSV, inference JSON)"),
    "pipeline": ("dawnpipe.pipeline.cli", "write dvc.yaml and params.yaml from the stage table, or print the resolved config"),
}


class _Parser(argparse.ArgumentParser):
    """argparse's own usage errors ("unrecognized arguments: ...") quote the
    arguments: terminal-safe, like every other error line."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {terminal_safe(message)}\n")


def _top_parser() -> argparse.ArgumentParser:
    width = max(len(c) for c in COMMANDS)
    lines = "\n".join(f"  {c:<{width}}  {h}" for c, (_, h) in COMMANDS.items())
    p = _Parser(
        prog="dawnpipe",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="DAWNBench-style time-to-accuracy benchmark pipeline.",
        epilog=f"commands:\n{lines}\n\nRun 'dawnpipe <command> --help' for a command's arguments.",
    )
    p.add_argument("--version", action="store_true", help="print the version and exit")
    p.add_argument("--task-dir", metavar="DIR", help="a directory of extra task files and their data modules (repeatable; before the command)")
    p.add_argument("command", nargs="?", help="one of the commands below")
    return p


def take_task_dirs(argv: list[str]) -> list[str]:
    """``--task-dir DIR`` options before the command: extra tasks for this
    command (and the processes it starts: dawnpipe.tasks.use_task_dirs)."""
    dirs = []
    while len(argv) >= 2 and argv[0] == "--task-dir":
        dirs.append(argv[1])
        argv = argv[2:]
    if dirs:
        from dawnpipe.tasks import use_task_dirs

        use_task_dirs(dirs)
    return argv


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if any("\x00" in a for a in argv):  # a process cannot be given one; a caller in Python can
        print("dawnpipe: usage error: an argument holds a NUL byte", file=sys.stderr)
        sys.exit(2)
    argv = take_task_dirs(argv)
    top = _top_parser()
    if not argv or argv[0] in ("-h", "--help"):
        top.print_help()
        sys.exit(0 if argv else 2)
    if argv[0] == "--version":
        from dawnpipe import __version__

        print(__version__)
        sys.exit(0)
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        top.print_usage(sys.stderr)
        print(f"dawnpipe: error: unknown command {terminal_safe(repr(command))} (choose from {', '.join(COMMANDS)})", file=sys.stderr)
        sys.exit(2)
    module_name, help_line = COMMANDS[command]
    parser = _Parser(prog=f"dawnpipe {command}", description=help_line)
    try:  # options may list the tasks: a malformed task file is named here, in one line
        module = importlib.import_module(module_name)
        module.configure(parser)
    except DawnpipeError as e:
        print(f"dawnpipe {command}: error: {terminal_safe(str(e))}", file=sys.stderr)
        sys.exit(1)
    except ModuleNotFoundError as e:  # an optional package missing: an install, not a bug
        print(f"dawnpipe {command}: error: {missing_package(e) or f'{e} (a bug in dawnpipe: please report it)'}", file=sys.stderr)
        sys.exit(1)
    args = parser.parse_args(rest)  # exits 2 on usage errors
    sys.exit(run_command(command, module.run, args))


def run_command(command: str, func, args, prog: str | None = None) -> int:
    """Run a command body; turn expected failures into one-line messages
    headed ``prog`` (``dawnpipe <command>``; a bench script gives its own)."""
    prog = prog or f"dawnpipe {command}"
    try:
        code = func(args)
    except UsageError as e:
        print(f"{prog}: usage error: {terminal_safe(str(e))}", file=sys.stderr)
        return 2
    except DawnpipeError as e:
        print(f"{prog}: error: {terminal_safe(str(e))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130

    except OSError as e:
        # An OSError names its file itself (ENOENT, EISDIR, EACCES, ENOSPC, ...): that is the whole message.
        where = f": {e.filename}" if e.filename else ""
        print(f"{prog}: error: {terminal_safe(f'{e.strerror or e}{where}')}", file=sys.stderr)
        return 1
    except Exception as e:  # a bug in dawnpipe, not bad input: keep the evidence, off the terminal
        if isinstance(e, ModuleNotFoundError) and (message := missing_package(e)) is not None:  # an install, not a bug
            print(f"{prog}: error: {message}", file=sys.stderr)
            return 1
        report = crash_report(command)
        print(
            f"{prog}: internal error: {type(e).__name__}: {terminal_safe(str(e))} (a bug in dawnpipe; please report it with {report})",
            file=sys.stderr,
        )
        return 70
    return int(code or 0)
