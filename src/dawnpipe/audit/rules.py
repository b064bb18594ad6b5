"""The auditor's limits (rules.yaml beside this module): data, not code.

A reviewer changes them without editing the package: ``--rules FILE`` names
a YAML file holding only the keys to change (e.g. ``plausible:
{price_per_hour_usd: {min: 0.1, max: 50}}``), merged over rules.yaml;
``--max-bytes N`` sets both size caps."""

from __future__ import annotations

import copy
import functools
import math
from importlib import resources
from pathlib import Path
from typing import Any

from dawnpipe.errors import DawnpipeError, UsageError
from dawnpipe.fileio import parse_yaml, read_yaml
from dawnpipe.schemas import jsonschema_check
from dawnpipe.schemas.jsonschema_check import describe


@functools.cache
def _default_rules() -> dict[str, Any]:
    return parse_yaml(resources.files(__package__).joinpath("rules.yaml").read_text(encoding="utf-8"))


def load_rules(max_bytes: int | None = None, overrides: list[Path] | tuple[Path, ...] = ()) -> dict[str, Any]:
    """The rules, with the keys of each YAML file of ``overrides`` merged over
    them in order (a later file wins), then the size caps set to ``max_bytes``
    when given."""
    rules = copy.deepcopy(_default_rules())
    for path in overrides:
        doc = read_yaml(Path(path))
        if doc is not None:
            _merge(rules, doc, str(path), "")
    if max_bytes is not None:
        rules["limits"]["max_json_bytes"] = rules["limits"]["max_tsv_bytes"] = int(max_bytes)
    # the merged rules as a whole: an integer where one is needed (a float cap is named, not a crash later)
    jsonschema_check.check(rules, jsonschema_check.package_schema("audit_rules"), " + ".join(["rules.yaml", *map(str, overrides)]))
    return rules


def _merge(rules: dict[str, Any], doc: Any, source: str, prefix: str) -> None:
    """Replace the values of ``rules`` that ``doc`` gives, key by key; a key
    rules.yaml does not have, or a value of another kind, is named."""
    if not isinstance(doc, dict):
        raise DawnpipeError(f"{source}: field '{prefix.rstrip('.') or '(top level)'}': expected a mapping of rules, got {describe(doc)}")
    for key, value in doc.items():
        where = f"{prefix}{key}"
        if key not in rules:
            raise DawnpipeError(f"{source}: field '{where}': not an audit rule (known here: {', '.join(map(str, rules))})")
        default = rules[key]
        if isinstance(default, dict):
            _merge(default, value, source, where + ".")
        elif isinstance(default, int) and not isinstance(default, bool):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise DawnpipeError(f"{source}: field '{where}': expected a whole number >= 1, got {describe(value)}")
            rules[key] = value
        elif isinstance(default, float):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise DawnpipeError(f"{source}: field '{where}': expected a number >= 0, got {describe(value)}")
            rules[key] = float(value)
        elif not isinstance(value, type(default)):
            raise DawnpipeError(f"{source}: field '{where}': expected {type(default).__name__}, got {describe(value)}")
        else:
            rules[key] = value


def add_arguments(p, *, positionals: bool = False) -> None:
    """``--max-bytes`` and ``--rules``, for every command that audits.
    ``--rules`` takes several files (as DVC writes a list), or, for a command
    with positional arguments (``positionals``) that it would swallow, one file
    per ``--rules``."""
    p.add_argument("--max-bytes", type=int, metavar="N", help="size cap of any one submission file (default: rules.yaml, 256 KiB JSON / 4 MiB TSV)")
    many = {"action": "append"} if positionals else {"action": "extend", "nargs": "+"}
    p.add_argument(
        "--rules",
        type=Path,
        default=[],
        metavar="FILE",
        **many,
        help="YAML file(s) of audit rules to change (e.g. the plausible price range), merged in order over the package's "
        "rules.yaml" + ("; repeat --rules for several" if positionals else ""),
    )


def rules_from_args(args) -> dict[str, Any]:
    if args.max_bytes is not None and args.max_bytes < 1:
        raise UsageError(f"--max-bytes must be a positive number of bytes, got {args.max_bytes}")
    for path in args.rules:
        if not path.is_file():
            raise UsageError(f"--rules {path}: no such file")
    return load_rules(args.max_bytes, args.rules)


def lookup(doc: Any, dotted: str) -> Any:
    """``doc['misc']['dawnpipe']['threshold']`` for 'misc.dawnpipe.threshold'; None when absent."""
    for key in dotted.split("."):
        if not isinstance(doc, dict) or key not in doc:
            return None
        doc = doc[key]
    return doc
