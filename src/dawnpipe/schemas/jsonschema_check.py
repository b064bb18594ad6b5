"""Configuration-like files checked against JSON schemas, with one message
per problem that names the file, the field and the reason:

    config/test.yaml: field 'inference.warmup': expected integer, got str 'ten'

jsonschema's own messages print the whole offending instance; these say what
was expected in words. Beyond the schema: no NaN or infinity anywhere (YAML
reads ``.nan`` as a float, which jsonschema accepts as a number) and a
boolean is never a number (jsonschema agrees; said here so no schema
relaxes it). The schemas live beside this module (``*.schema.yaml``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any

import jsonschema
import yaml

from dawnpipe.errors import DawnpipeError


@functools.cache
def package_schema(name: str) -> dict[str, Any]:
    """``<name>.schema.yaml`` of this package (read like dawnpipe.fileio.parse_yaml, a module this layer does not import)."""
    text = resources.files(__package__).joinpath(f"{name}.schema.yaml").read_text(encoding="utf-8")
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def field_name(path: Iterable[Any]) -> str:
    return ".".join(str(p) for p in path) or "(top level)"


def describe(value: Any) -> str:
    if value is None:
        return "null"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 80 else text[:77] + '...'}"


TYPE_WORDS = {
    "object": "a mapping",
    "array": "a list",
    "number": "a number",
    "integer": "a whole number",
    "string": "a string",
    "boolean": "true or false",
    "null": "null",
}
BOUNDS = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}


def _expected(error: jsonschema.ValidationError) -> str:
    want = error.validator_value
    return " or ".join(TYPE_WORDS.get(w, w) for w in (want if isinstance(want, list) else [want]))


def message(error: jsonschema.ValidationError) -> str:
    """One reason in words."""
    v, schema = error.validator, error.schema
    if v == "additionalProperties":
        known = list(schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(known)) if isinstance(error.instance, Mapping) else []
        return f"unknown key {', '.join(map(repr, extra))}" + (f" (known: {', '.join(known)})" if known else "")
    if v == "type":
        return f"expected {_expected(error)}, got {describe(error.instance)}"
    if v == "enum":
        return f"expected one of {', '.join(map(str, error.validator_value))}, got {describe(error.instance)}"
    if v in BOUNDS:
        return f"expected a number {BOUNDS[v]} {error.validator_value}, got {describe(error.instance)}"
    if v in ("minItems", "minLength"):
        return f"expected at least {error.validator_value} {'item' if v == 'minItems' else 'character'}{'s' if error.validator_value != 1 else ''}, got {describe(error.instance)}"
    if v == "pattern":
        return f"expected text matching {error.validator_value}, got {describe(error.instance)}"
    if v == "uniqueItems":
        return f"expected no repeated items, got {describe(error.instance)}"
    return error.message if len(error.message) <= 200 else error.message[:197] + "..."


def first_problem(doc: Any, schema: Mapping[str, Any]) -> tuple[str, str] | None:
    """(field, reason) of the first problem of ``doc``, or None. A missing key
    is named itself (``metric.threshold``), not its parent."""
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        e = errors[0]
        if e.validator == "required" and isinstance(e.instance, Mapping):
            missing = next(k for k in e.validator_value if k not in e.instance)
            expected = (e.schema.get("properties", {}).get(missing) or {}).get("type")
            return field_name([*e.absolute_path, missing]), "missing" + (
                f" (expected {TYPE_WORDS.get(expected, expected)})" if isinstance(expected, str) else ""
            )
        return field_name(e.absolute_path), message(e)
    if (bad := non_finite(doc)) is not None:
        return field_name(bad), "not a finite number (NaN or infinity)"
    return None


def check(doc: Any, schema: Mapping[str, Any], source: str) -> None:
    """Raise a DawnpipeError ``SOURCE: field 'a.b': reason`` for the first problem."""
    if (problem := first_problem(doc, schema)) is not None:
        where, why = problem
        raise DawnpipeError(f"{source}: field '{where}': {why}")


def non_finite(doc: Any, path: tuple = ()) -> tuple | None:
    """The path of the first NaN or infinity in ``doc``, or None."""
    if isinstance(doc, float) and not math.isfinite(doc):
        return path
    items = doc.items() if isinstance(doc, Mapping) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        if (found := non_finite(value, (*path, key))) is not None:
            return found
    return None
