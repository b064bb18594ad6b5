"""Entries: schema defaults, errors naming the field, and a hash that ignores comments."""

from pathlib import Path

import pytest
import yaml

from dawnpipe.entries import config_hash, load_entry
from dawnpipe.errors import DawnpipeError

ROOT = Path(__file__).resolve().parent.parent
ENTRIES = sorted((ROOT / "config" / "entries").glob("*.yaml"))


@pytest.mark.parametrize("path", ENTRIES, ids=[p.stem for p in ENTRIES])
def test_every_shipped_entry_is_valid(path):
    entry = load_entry(path)
    assert entry["id"] == path.stem
    if entry["framework"] == "program":  # its hyperparameters are its own (docs/programs.md)
        assert entry["program"]["command"] and entry["model"]
        return
    assert entry["hyperparameters"]["schedule"]["kind"] in ("step", "onecycle", "constant")


def test_defaults_are_filled(tmp_path):
    path = tmp_path / "mini.yaml"
    path.write_text("task: fashion-mnist\nframework: pytorch\nmodel: resnet20\nhardware: local-cpu\nhyperparameters: {batch_size: 64, epochs: 2, lr: 0.1}\n")
    entry = load_entry(path)
    hp = entry["hyperparameters"]
    assert hp["precision"] == "fp32" and hp["augment"] == {"crop_padding": 0, "flip": False, "random_resized_crop": {"size": 0, "min_scale": 0.35}}
    assert entry["distributed"] == {"nodes": 1, "processes_per_node": 1}


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (
            "task: fashion-mnist\nframework: pytorch\nmodel: m\nhardware: h\nhyperparameters: {batch_size: 0, epochs: 2, lr: 0.1}\n",
            "hyperparameters.batch_size",
        ),
        ("task: fashion-mnist\nframework: jax\nmodel: m\nhardware: h\nhyperparameters: {batch_size: 1, epochs: 2, lr: 0.1}\n", "framework"),
        ("task: fashion-mnist\nframework: pytorch\nmodel: m\nhardware: h\nhyperparameters: {batch_size: 1, epochs: 2, lr: 0.1, lrr: 2}\n", "hyperparameters"),
        ("- just a list\n", "must be a mapping"),
        ("task: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_entries_name_the_file_and_field(tmp_path, text, where):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(DawnpipeError) as err:
        load_entry(path)
    assert str(path) in str(err.value) and where in str(err.value)


def test_hash_ignores_comments_and_key_order_but_not_values():
    a = yaml.safe_load("a: 1  # one\nb: {c: 2.0}\n")
    b = yaml.safe_load("b: {c: 2.0}\n# reordered\na: 1\n")
    c = yaml.safe_load("a: 1\nb: {c: 2.5}\n")
    assert config_hash(a) == config_hash(b) != config_hash(c)
