"""pipeline: the workflow's own files, made from the stage table.

    dawnpipe pipeline dvc [--config FILE ...] [--check]   # write (or check) dvc.yaml and params.yaml
    dawnpipe pipeline config [--config FILE ...]          # the resolved configuration, as YAML
    dawnpipe pipeline docs [--check]                      # write (or check) docs/pipeline.md

Run from the project's root (beside the Snakefile). ``--config`` files are
laid over config/config.yaml in order, as ``snakemake --configfile`` does.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from dawnpipe.display import terminal_safe
from dawnpipe.errors import DawnpipeError, UsageError
from dawnpipe.fileio import load_yaml_text, read_yaml, write_text


def configure(p) -> None:
    p.add_argument(
        "what",
        choices=["dvc", "config", "docs"],
        help="dvc: write dvc.yaml and params.yaml; config: print the resolved configuration; docs: write docs/pipeline.md from the stage table",
    )
    p.add_argument("--config", action="append", default=[], type=Path, metavar="FILE", help="a config file laid over config/config.yaml (repeatable)")
    p.add_argument(
        "--check",
        action="store_true",
        help="dvc: write nothing; exit 1 if dvc.yaml or params.yaml differ from what would be written "
        "(without --config: for the config files params.yaml was written from); docs: the same for docs/pipeline.md",
    )


def run(args) -> int:
    from dawnpipe.pipeline.config import SCHEMA, resolve
    from dawnpipe.pipeline.plan import Plan

    if not SCHEMA.is_file():
        raise UsageError(f"no {SCHEMA} here: run `dawnpipe pipeline` from the project's root (beside the Snakefile)")
    if args.what == "docs":
        return pipeline_docs(args.check)
    config_files = args.config
    if args.what == "dvc" and args.check and not config_files:
        config_files = recorded_config_files()
    config = resolve(config_files)
    Plan(config)  # the checks that need the tasks and the entries: a config is printed only when it would run
    if args.what == "config":
        print(yaml.safe_dump(config.values, sort_keys=False, width=1000), end="")
        return 0
    from dawnpipe.pipeline.dvc import DVC_YAML, PARAMS_YAML, generated_files, stale_variant_files

    wanted = generated_files(config)
    variants = f" and {len(wanted) - 2} study variants' recipes" if len(wanted) > 2 else ""
    if args.check:
        stale = [path for path, text in wanted.items() if not path.is_file() or path.read_text(encoding="utf-8") != text]
        stale += stale_variant_files(wanted)
        if stale:
            first = PARAMS_YAML if PARAMS_YAML in stale else stale[0]  # params.yaml's difference names the config keys
            why = what_changed(first, wanted[first], config) if first in wanted else f"{first} is of a variant the configuration no longer has"
            named = " and ".join(map(str, stale)) if len(stale) <= 2 else f"{', '.join(map(str, stale[:2]))} and {len(stale) - 2} more"
            raise DawnpipeError(
                f"{named} out of date with {' + '.join(config.files)} ({why}): "
                f"write them again with `dawnpipe pipeline dvc{''.join(f' --config {f}' for f in config.files[1:])}` (or `make dvc.yaml`), then `dvc repro`"
            )
        print(terminal_safe(f"pipeline: {DVC_YAML} and {PARAMS_YAML}{variants} are up to date with {' + '.join(config.files)}"))
        return 0
    for path in stale_variant_files(wanted):
        path.unlink()
    for path, text in wanted.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, text)
    print(terminal_safe(f"pipeline: wrote {DVC_YAML} and {PARAMS_YAML}{variants} for {' + '.join(config.files)}"))
    return 0


def pipeline_docs(check: bool) -> int:
    """docs/pipeline.md from the stage table (no configuration is read)."""
    from dawnpipe.pipeline.docs import PAGE, page

    text = page()
    if check:
        if not PAGE.is_file() or PAGE.read_text(encoding="utf-8") != text:
            why = what_changed(PAGE, text, None)
            raise DawnpipeError(f"{PAGE} out of date with the stage table ({why}): write it again with `dawnpipe pipeline docs` (or `make docs`)")
        print(f"pipeline: {PAGE} is up to date with the stage table")
        return 0
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    write_text(PAGE, text)
    print(f"pipeline: wrote {PAGE}")
    return 0


def recorded_config_files() -> list[Path]:
    """The config files params.yaml says it was written from (none: the default)."""
    from dawnpipe.pipeline.config import DEFAULT
    from dawnpipe.pipeline.dvc import PARAMS_YAML

    if not PARAMS_YAML.is_file():
        return []
    doc = read_yaml(PARAMS_YAML) or {}
    files = doc.get("config_files") if isinstance(doc, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise DawnpipeError(
            f"{PARAMS_YAML}: field 'config_files': expected the list of config files it was written from; write it again with `dawnpipe pipeline dvc`"
        )
    return [Path(f) for f in files if Path(f) != DEFAULT]


def what_changed(path: Path, wanted: str, config) -> str:
    """The first difference, in words: the config keys that differ from what
    params.yaml records, else where the text first differs."""
    if not path.is_file():
        return f"{path} is missing"
    old_text = path.read_text(encoding="utf-8")
    if path.name == "params.yaml":
        try:
            doc = load_yaml_text(old_text, path)  # bounded, as every YAML dawnpipe reads
        except DawnpipeError as e:
            return str(e)
        old = doc.get("config") if isinstance(doc, dict) else None
        if not isinstance(old, dict):
            return f"{path}: field 'config': not a mapping of config keys"
        keys = sorted(k for k in {*old, *config.values} if old.get(k) != config.values.get(k))
        if keys:
            return "changed: " + ", ".join(f"{k} {old.get(k)!r} -> {config.values.get(k)!r}" for k in keys[:3])
    for old_line, new_line in zip([*old_text.splitlines(), ""], wanted.splitlines()):
        if old_line != new_line:
            at = next((i for i, (a, b) in enumerate(zip(old_line, new_line)) if a != b), min(len(old_line), len(new_line)))
            return f"{path} now reads ...{new_line[max(0, at - 40) : at + 60].strip()}..."
    return f"{path} differs"
