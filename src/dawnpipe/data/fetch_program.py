"""fetch-program: a program entry's repository at its pinned commit
(``program.source``), for a reviewer re-running a submission's ``codeURL``.

    python -m dawnpipe fetch-program --url https://github.com/someone/recipe.git \\
        --commit 0123456789abcdef0123456789abcdef01234567 --dest data/programs/their-entry

The repository is cloned into a temporary folder beside ``--dest``, the
commit checked out (detached) and compared with ``git rev-parse HEAD``; a
commit the repository does not have is refused, naming the URL and the
commit, with nothing written. Then the checkout, without its ``.git``,
replaces ``--dest`` whole, with ``.dawnpipe-source.json`` recording where it
came from. Git runs with what could act on a fetched repository turned off:
no terminal prompt, no system or global configuration, no hooks, no
``ext::`` transport, symbolic links checked out as plain files, no
submodules. The URL is the entry's (as trusted as a config); what the
repository holds is not, and it is never run here: only the entry's command
runs it, in the train stage.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import subprocess
from pathlib import Path

from dawnpipe.display import terminal_safe
from dawnpipe.errors import DawnpipeError, UsageError
from dawnpipe.fileio import write_json

COMMIT = re.compile(r"^[0-9a-f]{40}$")
SAFE_CONFIG = ("-c", "core.symlinks=false", "-c", "core.hooksPath=/dev/null", "-c", "protocol.ext.allow=never", "-c", "submodule.recurse=false")
TIMEOUT_S = 1800


def configure(p) -> None:
    p.add_argument("--url", required=True, help="git URL or local path of the program's repository")
    p.add_argument("--commit", required=True, help="the full commit id to check out (40 hex digits)")
    p.add_argument("--dest", required=True, type=Path, help="output: the checkout (data/programs/<entry>)")


def _git(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env |= {"GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_ASKPASS": "true"}
    try:
        return subprocess.run(["git", *SAFE_CONFIG, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except FileNotFoundError:
        raise DawnpipeError("git is not installed; fetch-program needs it") from None
    except subprocess.TimeoutExpired:
        raise DawnpipeError(f"git {args[0]} took over {TIMEOUT_S} s; stopped") from None


def _why(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in (proc.stderr or proc.stdout).strip().splitlines() if line.strip()]
    return terminal_safe(lines[-1][:300]) if lines else f"exit status {proc.returncode}"


def fetch_program(url: str, commit: str, dest: Path) -> dict:
    """Check ``url`` out at ``commit`` into ``dest``; the record written beside the files."""
    if not COMMIT.match(commit):
        raise UsageError(f"--commit: expected the full commit id (40 lowercase hex digits), got {terminal_safe(repr(commit))}")
    if url.startswith("-"):
        raise UsageError(f"--url: {terminal_safe(repr(url))} is not a repository URL or path")
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.parent / f".{dest.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        print(f"fetch-program: cloning {terminal_safe(url)}", flush=True)
        proc = _git(["clone", "--no-checkout", "--quiet", "--no-recurse-submodules", "--", url, str(partial)])
        if proc.returncode != 0:
            raise DawnpipeError(f"{url}: cannot be cloned ({_why(proc)})")
        proc = _git(["checkout", "--quiet", "--detach", commit, "--"], cwd=partial)
        if proc.returncode != 0:
            raise DawnpipeError(f"{url}: has no commit {commit} ({_why(proc)}); refused")
        head = _git(["rev-parse", "HEAD"], cwd=partial).stdout.strip()
        if head != commit:
            raise DawnpipeError(f"{url}: checked out {head or 'nothing'}, not the pinned commit {commit}; refused")
        shutil.rmtree(partial / ".git")
        record = {
            "url": url,
            "commit": commit,
            "fetched": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "files": sum(len(f) for _, _, f in os.walk(partial)),
        }
        write_json(partial / ".dawnpipe-source.json", record)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(partial, dest)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    print(f"fetch-program: {terminal_safe(url)} at {commit}: {record['files']} files -> {dest}", flush=True)
    return record


def run(args) -> int:
    fetch_program(args.url, args.commit, args.dest)
    return 0
