"""The leaderboard's objectives as data (``objectives.yaml``, checked against
``schemas/objectives.schema.yaml``): what each is, its unit and display
rule, and where its value comes from in a run's records and in an audited
submission. The leaderboard ranks them, the report builds rows from them and
the page renders them; none of them names an objective in code.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from dawnpipe.display import FORMATTERS
from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import parse_yaml
from dawnpipe.schemas import jsonschema_check

SOURCE = "src/dawnpipe/objectives/objectives.yaml"


@dataclass(frozen=True)
class Objective:
    name: str
    title: str
    what: str
    unit: str
    result: str  # "train" or "inference"
    run: str  # dotted path into a run's records
    submission: str | None  # the audit's figure, or None
    fields: dict[str, str] = field(default_factory=dict)
    submission_fields: dict[str, str] = field(default_factory=dict)
    columns: dict[str, str] = field(default_factory=dict)
    optional: bool = False
    measured: str | None = None  # where a run that did not converge shows it measured anyway
    node_local: bool = False  # measured on rank 0's node only


def of_result(result: str) -> list[Objective]:
    """The objectives of a kind of result (train, inference), in table order."""
    return [o for o in objectives().values() if o.result == result]


def from_doc(doc: Any, source: str = SOURCE) -> dict[str, Objective]:
    """Objectives from a parsed table; a problem names the source and the field."""
    jsonschema_check.check(doc, jsonschema_check.package_schema("objectives"), source)
    table = {}
    for name, spec in doc.items():
        if spec["unit"] not in FORMATTERS:
            raise DawnpipeError(f"{source}: field '{name}.unit': no display rule for {spec['unit']!r} (dawnpipe.display knows {', '.join(FORMATTERS)})")
        table[name] = Objective(name=name, **spec)
    return table


@functools.cache
def objectives() -> dict[str, Objective]:
    text = resources.files(__package__).joinpath("objectives.yaml").read_text(encoding="utf-8")
    return from_doc(parse_yaml(text))


def lookup(records: dict[str, Any], path: str) -> Any:
    """The value at a dotted ``path`` of a run's records, or None where any part is absent."""
    value: Any = records
    for part in path.split("."):
        if not isinstance(value, dict) or value.get(part) is None:
            return None
        value = value[part]
    return value
