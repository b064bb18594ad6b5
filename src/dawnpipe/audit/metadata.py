"""Submission JSON: parse it strictly, settle field types, note the quirks.

Values are checked afterwards by the schemas of
``dawnpipe.schemas.submissions``, all files at once; this module decides
only what each field *is*: a JSON string where a number belongs (or the
reverse) is an error here, by field, and the field is then left out of the
value checks so it is reported once.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from typing import Any

from dawnpipe.audit.files import safe_text
from dawnpipe.audit.model import FileAudit

_PADDED_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_LOOSE_DATE = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})")
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


class _Reject(ValueError):
    pass


def _no_constants(name: str):
    raise _Reject(f"{name} is not a JSON number")


def _whole_number(text: str) -> int | float:
    """A JSON whole number: an int while a float holds it exactly, else the
    float it is (infinity beyond 1e308, reported as too large like 1e400), so
    that no later float() of a submission's value can overflow."""
    return int(text) if len(text.lstrip("-")) <= 15 else float(text)


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _short(value: Any, limit: int = 40) -> str:
    """A value as it reads in JSON, cut short: 'a string' in quotes, 42 or [1, 2] without."""
    if isinstance(value, str):
        text = safe_text(value)
        return repr(text if len(text) <= limit else text[:limit] + "...")
    text = safe_text(json.dumps(value, default=str)[:200])
    return text if len(text) <= limit else text[:limit] + "..."


def parse_json(text: str, f: FileAudit) -> dict[str, Any] | None:
    """The top-level object, or None (with an error on ``f``)."""
    objects_with_duplicates: list[list[str]] = []

    def pairs(items):
        counts = Counter(k for k, _ in items)
        dups = sorted(k for k, n in counts.items() if n > 1) if len(counts) != len(items) else []
        objects_with_duplicates.append(dups)
        return dict(items)

    try:
        doc = json.loads(text, object_pairs_hook=pairs, parse_constant=_no_constants, parse_int=_whole_number)
    except json.JSONDecodeError as e:
        f.add("error", "json.invalid", f"line {e.lineno}, column {e.colno}", f"not valid JSON: {e.msg}")
        return None
    except RecursionError:
        f.add("error", "json.too-deep", "file", "JSON nested too deeply to read")
        return None
    except ValueError as e:  # NaN/Infinity, or an integer with thousands of digits
        f.add("error", "json.invalid", "file", f"not valid JSON: {safe_text(str(e))}")
        return None
    if not isinstance(doc, dict):
        f.add("error", "json.not-object", "file", f"the top level is {json_type(doc)}, not an object of fields")
        return None
    if objects_with_duplicates and objects_with_duplicates[-1]:
        dups = objects_with_duplicates[-1]
        f.add(
            "error",
            "json.duplicate-field",
            f"field {safe_text(dups[0])}",
            f"given more than once ({', '.join(safe_text(d) for d in dups)}); JSON readers disagree on which value counts",
        )
    return doc


def typed_fields(doc: dict[str, Any], fields: dict[str, tuple[type, bool]], f: FileAudit, rules: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """(values for the schema check's frame, fields already reported as wrong). Notes quirks on ``f``."""
    row: dict[str, Any] = {}
    reported: set[str] = set()
    for name, (kind, required) in fields.items():
        value = doc.get(name)
        row[name] = None
        if name not in doc:
            continue  # a required one is reported by the model (not nullable)
        if value is None:
            if not required and kind is float:
                f.add(
                    "warning", "json.null-price", f"field {name}", f"null (harmless; treated as unknown: no {'cost' if name != 'latency' else 'latency'} rank)"
                )
            continue
        if kind is str:
            if not isinstance(value, str):
                f.add("error", "json.type", f"field {name}", f"expected a string, got {json_type(value)} {_short(value)}")
                reported.add(name)
                continue
            clean = safe_text(value)
            if clean != clean.strip():
                f.add("warning", "json.whitespace", f"field {name}", f"leading or trailing spaces in {_short(clean)} (harmless; stripped)")
                clean = clean.strip()
            row[name] = clean
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                f.add("error", "json.type", f"field {name}", f"expected a number, got {json_type(value)} {_short(value)}")
                reported.add(name)
                continue
            number = float(value)
            if not math.isfinite(number):
                f.add("error", "json.not-finite", f"field {name}", "a number too large to represent (read as infinity)")
                reported.add(name)
                continue
            row[name] = number
    _note_extras(doc, fields, f)
    _note_misc(doc, f)
    _note_date(row, f)
    _note_paths(row, rules, f)
    return row, reported


def _note_extras(doc: dict[str, Any], fields: dict[str, Any], f: FileAudit) -> None:
    extra = [k for k in doc if k not in fields and k != "misc"]
    if extra:
        shown = ", ".join(safe_text(k) for k in extra[:8]) + (f" and {len(extra) - 8} more" if len(extra) > 8 else "")
        f.add("warning", "json.extra-field", f"field {safe_text(extra[0])}", f"not a DAWNBench v1 field: {shown} (harmless; kept as given, not checked)")


def _note_misc(doc: dict[str, Any], f: FileAudit) -> None:
    if "misc" not in doc or isinstance(doc["misc"], dict):
        return
    if isinstance(doc["misc"], str):
        f.add("warning", "json.misc-string", "field misc", "a string, not an object of notes (harmless; kept as a note)")
    else:
        f.add("warning", "json.misc-type", "field misc", f"{json_type(doc['misc'])}, not an object of notes (ignored)")


def _note_date(row: dict[str, Any], f: FileAudit) -> None:
    stamp = row.get("timestamp")
    if not isinstance(stamp, str):
        return
    m = _LOOSE_DATE.fullmatch(stamp)
    if m and not _PADDED_DATE.fullmatch(stamp):
        padded = f"{m.group(1)}-{int(m.group(2)):02d}-{int(m.group(3)):02d}"
        f.add("warning", "json.date-not-padded", "field timestamp", f"{stamp!r} is not zero-padded (harmless; read as {padded})")
        row["timestamp"] = padded


def outside_path(value: str) -> bool:
    """True for an absolute path or one with a '..' segment (or a file: URL to one)."""
    rest = value
    m = _URL.match(value)
    if m and m.group(1).lower() == "file":
        rest = value[len(m.group(0)) :]
        rest = rest[2:] if rest.startswith("//") else rest
        return True if rest.startswith("/") else outside_path(rest)
    if m and len(m.group(1)) > 1:
        return False  # a URL; never fetched
    if rest.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", rest):
        return True
    return ".." in re.split(r"[\\/]", rest)


def _note_paths(row: dict[str, Any], rules: dict[str, Any], f: FileAudit) -> None:
    for name in rules["path_fields"]:
        value = row.get(name)
        if not isinstance(value, str) or not value:
            continue
        m = _URL.match(value)
        scheme = m.group(1).lower() if m and len(m.group(1)) > 1 else None
        if outside_path(value):
            f.add("warning", "json.path-outside", f"field {name}", f"{_short(value)} points outside the submission (an absolute path or '..'); never opened")
        elif scheme not in (None, "http", "https", "file"):
            f.add("warning", "json.url-scheme", f"field {name}", f"{_short(value)} is not an http(s) URL; never fetched")
