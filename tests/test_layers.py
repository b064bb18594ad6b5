"""The import structure of src/dawnpipe: no cycle anywhere (function-level
imports included), and every top-level module placed in a layer of the
import-linter contract (.importlinter), which `make lint` checks."""

from __future__ import annotations

import configparser
import sys

import grimp
from conftest import ROOT


def strongly_connected(graph) -> list[list[str]]:
    """Tarjan's components of more than one module: each is an import cycle."""
    sys.setrecursionlimit(10000)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycle_in_the_package():
    assert strongly_connected(grimp.build_graph("dawnpipe")) == []


def test_every_top_level_module_is_in_a_layer():
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    layered = {name.strip() for line in config["importlinter:contract:layers"]["layers"].splitlines() for name in line.split("|") if name.strip()}
    top = {f"dawnpipe.{p.stem}" for p in (ROOT / "src/dawnpipe").glob("*.py") if p.stem != "__init__"}
    top |= {f"dawnpipe.{p.name}" for p in (ROOT / "src/dawnpipe").iterdir() if (p / "__init__.py").is_file()}
    assert top - layered == set(), "add these to a layer of .importlinter"
    assert layered - top == set(), "these are in .importlinter but not in the package"
