"""Weights a contract 2 program hands over (docs/programs.md): program.model
in the entry, checked when the configuration is read, and the names of the
weights files."""

from __future__ import annotations

import datetime
import json

import pytest

from dawnpipe.entries import validate_entry
from dawnpipe.errors import DawnpipeError
from dawnpipe.programs import weights


def one_line(message: str) -> None:
    assert "\n" not in message and "Traceback" not in message, message


# ------------------------------------------------------------------ program.model in the entry
ENTRY = {
    "task": "fashion-mnist",
    "hardware": "local-cpu",
    "program": {"contract": 2, "command": ["python", "train.py", "--out", "{out}"], "model": {"factory": "main:Net", "preprocessing": {"layout": "NCHW"}}},
}


def entry_with(**model) -> dict:
    doc = json.loads(json.dumps(ENTRY))
    doc["program"]["model"].update(model)
    return doc


def test_program_model_is_filled_in_with_its_defaults():
    e = validate_entry(entry_with(kwargs={"width": 16, "blocks": [1, 2], "norm": None}), "config/entries/p.yaml")
    model = e["program"]["model"]
    assert model["preprocessing"] == {"scale": 1.0, "mean": [0.0], "std": [1.0], "layout": "NCHW"}
    assert model["kwargs"] == {"width": 16, "blocks": [1, 2], "norm": None}
    assert validate_entry(entry_with(factory="nets.small:Factory.build"), "p.yaml")["program"]["contract"] == 2


@pytest.mark.parametrize(
    ("model", "contract", "field", "why"),
    [
        ({"factory": "main.Net"}, 2, "program.model.factory", 'expected "module:callable"'),
        ({"factory": "main:Net:x"}, 2, "program.model.factory", "got 'main:Net:x'"),
        ({"factory": "1main:Net"}, 2, "program.model.factory", 'expected "module:callable"'),
        ({"factory": "main:class"}, 2, "program.model.factory", 'expected "module:callable"'),
        ({"kwargs": {"since": datetime.date(2024, 1, 1)}}, 2, "program.model.kwargs.since", "a date; the factory's arguments are plain JSON"),
        ({"kwargs": {"sizes": [1, {2: "a"}]}}, 2, "program.model.kwargs.sizes[1]", "a key 2 that is not a string"),
        ({"kwargs": {"lr": float("nan")}}, 2, "program.model.kwargs.lr", "not a finite number"),
        ({"kwargs": [1, 2]}, 2, "program.model.kwargs", "expected a mapping"),
        ({"preprocessing": {"layout": "NCHW", "std": [0.5, 0.0, 0.5]}}, 2, "program.model.preprocessing.std.1", "expected a number > 0"),
        ({"preprocessing": {"layout": "NCHW", "scale": -1}}, 2, "program.model.preprocessing.scale", "expected a number > 0"),
        ({"preprocessing": {"layout": "NCHW", "mean": [0.1, 0.2], "std": [0.3, 0.3, 0.3]}}, 2, "program.model.preprocessing.std", "3 values, but mean has 2"),
        ({"preprocessing": {"layout": "CHW"}}, 2, "program.model.preprocessing.layout", "expected one of NCHW, NHWC"),
        ({"preprocessing": {"mean": [0.5]}}, 2, "program.model.preprocessing.layout", "missing"),
        ({"preprocessing": {"layout": "NCHW", "gamma": 2}}, 2, "program.model.preprocessing", "unknown key 'gamma'"),
        ({}, 1, "program.model", "a program hands over weights under contract 2"),
    ],
)
def test_a_program_model_that_cannot_be_represented_names_the_field(model, contract, field, why):
    doc = entry_with(**model)
    doc["program"]["contract"] = contract
    with pytest.raises(DawnpipeError) as err:
        validate_entry(doc, "config/entries/p.yaml")
    message = str(err.value)
    one_line(message)
    assert message.startswith(f"config/entries/p.yaml: field '{field}': ") and why in message, message


def test_the_weights_names_say_the_framework_and_the_epoch():
    assert weights.weights_names(3) == ("epoch3.pt", "epoch3.weights.h5")
    assert [weights.framework_of(n) for n in ("epoch3.pt", "epoch12.weights.h5", "epoch3.h5", "epoch.pt", "model.pt")] == ["torch", "keras", None, None, None]
    assert weights.epoch_of("/out/epoch12.weights.h5") == 12 and weights.epoch_of("/out/epoch1.onnx") is None
