"""What an audit produces: messages, per-file verdicts, submissions.

A message names the file, the place in it (a field, a line and column, or
the whole file) and the reason. A file's status is the worst severity among
its messages, where ``info`` notes leave a file ``ok``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}
STATUS_OF = {0: "ok", 1: "warning", 2: "error"}


@dataclass
class Message:
    severity: str  # info | warning | error
    code: str  # stable identifier of the check, e.g. "tsv.bom"
    where: str  # "field costPerHour", "line 12, column hours", "file"
    text: str

    def as_dict(self) -> dict[str, str]:
        return {"severity": self.severity, "code": self.code, "where": self.where, "message": self.text}


@dataclass
class FileAudit:
    path: str  # as found under the audited path
    source: str  # <Task>/<kind>/<name>: how the leaderboard refers to it
    kind: str  # train-json | train-tsv | inference | other
    task: str | None = None  # task name (cifar10, ...), None when unknown
    messages: list[Message] = field(default_factory=list)
    size: int | None = None
    fs_path: str = ""  # what is opened (may hold undecodable bytes; never printed)

    def add(self, severity: str, code: str, where: str, text: str) -> None:
        self.messages.append(Message(severity, code, where, text))

    @property
    def status(self) -> str:
        worst = max((SEVERITY_RANK[m.severity] for m in self.messages), default=0)
        return STATUS_OF[worst]

    def lines(self) -> list[str]:
        """'path: where: text' for every message, the form printed on the terminal."""
        return [f"{self.path}: {m.where}: {m.text}" if m.where != "file" else f"{self.path}: {m.text}" for m in self.messages]


@dataclass
class Submission:
    """A training submission (JSON + TSV) or an inference submission (JSON)."""

    kind: str  # train | inference
    task: Any  # dawnpipe.tasks.Task
    name: str  # base name without extension
    directory: str  # the <Task>/<kind> directory it was found in
    json: FileAudit | None = None
    tsv: FileAudit | None = None
    meta: dict[str, Any] = field(default_factory=dict)  # typed, normalized JSON fields
    doc: dict[str, Any] | None = None  # the JSON object as submitted
    log: Any = None  # dawnpipe.audit.tsvlog.Log: TSV columns by name, file line of each row
    figures: dict[str, Any] = field(default_factory=dict)  # what the audit recomputed
    notes: list[str] = field(default_factory=list)  # why it is not ranked, if it is not

    @property
    def files(self) -> list[FileAudit]:
        return [f for f in (self.json, self.tsv) if f is not None]

    @property
    def source(self) -> str:
        return (self.json or self.tsv).source

    @property
    def status(self) -> str:
        worst = max((SEVERITY_RANK[m.severity] for f in self.files for m in f.messages), default=0)
        return STATUS_OF[worst]

    @property
    def valid(self) -> bool:
        return self.json is not None and self.status != "error" and (self.kind == "inference" or self.tsv is not None)

    @property
    def anchor(self) -> str:
        return anchor_for(self.source)

    def errors(self) -> list[str]:
        return [
            f"{f.source}: {m.where}: {m.text}" if m.where != "file" else f"{f.source}: {m.text}"
            for f in self.files
            for m in f.messages
            if m.severity == "error"
        ]


def anchor_for(source: str) -> str:
    """An HTML id for a submission: readable, and unique for distinct sources."""
    import hashlib

    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", source).strip("-")[:80]
    return f"audit-{slug}-{hashlib.sha1(source.encode('utf-8', 'surrogatepass')).hexdigest()[:6]}"


@dataclass
class AuditReport:
    files: list[FileAudit]
    submissions: list[Submission]
    rules: dict[str, Any]
    skipped: int = 0  # files outside any <Task>/<kind> directory (README, LICENSE, ...)

    def counts(self) -> dict[str, int]:
        out = {"files": len(self.files), "ok": 0, "warning": 0, "error": 0}
        for f in self.files:
            out[f.status] += 1
        return out

    @property
    def exit_code(self) -> int:
        return 1 if any(f.status == "error" for f in self.files) else 0
