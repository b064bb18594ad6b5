"""What the trainers check and guarantee before and around the training loop,
without training: an entry's model and optimizer are validated before any
data is read, an epoch without a step is refused by name, the threshold checkpoint is copied
(never moved) out of the work directory, the per-epoch state carries every
random generator and the schedule's position, and a demo threshold is called
one in every line that names it."""

from __future__ import annotations

import random

import numpy as np
import pytest
import yaml
from conftest import ROOT, run_cli, train_command

from dawnpipe.errors import DawnpipeError
from dawnpipe.train.logbook import Logbook
from dawnpipe.train.outputs import publish_checkpoint
from dawnpipe.train.schedule import lr_at, steps_per_epoch
from dawnpipe.train.state import common_state, restore_common, why_not_resumable

FASTNET = yaml.safe_load((ROOT / "config/entries/fastnet.yaml").read_text())


def _train_args(entry, tmp_path):
    return train_command(entry, tmp_path / "no-such-data", tmp_path / "out")


@pytest.mark.parametrize(
    "change, message",
    [
        # the entry's own model_args, named when the entry is read (schemas/model_args.schema.yaml)
        ({"model": "resnet7"}, "field 'model_args': unknown key 'widths' (known: block, width, drop_path) (model resnet7, pytorch)"),
        (
            {"model_args": {"widthz": [8, 16, 32, 64]}},
            "field 'model_args': unknown key 'widthz' (known: widths, head_scale) (model fastnet, pytorch)",
        ),
        # what only the zoo knows: a CIFAR ResNet's depth is 6n + 2
        ({"model": "resnet7", "model_args": {}}, "model 'resnet7' with model_args {}: a basic CIFAR ResNet needs depth = 6n + 2, not 7"),
        # what torch.optim refuses of the values the schema allows
        (
            {"hyperparameters": {**FASTNET["hyperparameters"], "momentum": 0, "nesterov": True}},
            "hyperparameters.nesterov: true needs a momentum above 0",
        ),
        (
            {"hyperparameters": {**FASTNET["hyperparameters"], "optimizer": "adamw", "momentum": 1}},
            "hyperparameters.momentum 1 is adamw's beta1, which must be below 1",
        ),
    ],
)
def test_a_bad_model_or_optimizer_is_named_with_the_entry_file_before_any_data_is_read(tmp_path, change, message):
    entry = tmp_path / "bad.yaml"
    entry.write_text(yaml.safe_dump({**FASTNET, **change}))
    proc = run_cli(*_train_args(entry, tmp_path))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    # the data directory does not exist: had the data been read first, that would be the error
    assert f"{entry}: {message}" in proc.stderr, proc.stderr
    assert str(tmp_path / "no-such-data") not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_squad_reader_entry_is_checked_before_its_data(tmp_path):
    entry = tmp_path / "reader.yaml"
    entry.write_text(yaml.safe_dump({**yaml.safe_load((ROOT / "config/entries/drqa.yaml").read_text()), "model": "bidaf9"}))
    proc = run_cli(*_train_args(entry, tmp_path))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"{entry}: " in proc.stderr and "bidaf9" in proc.stderr


def test_steps_per_epoch_keeps_a_remainder_of_two_items_per_process():
    assert steps_per_epoch(1000, 100, None) == 10
    assert steps_per_epoch(1002, 100, None) == 11
    assert steps_per_epoch(1001, 100, None) == 10  # one item would break batch norm
    assert steps_per_epoch(1003, 100, None, world_size=2) == 10  # 3 items over 2 processes: one gets 1
    assert steps_per_epoch(1004, 100, None, world_size=2) == 11


def test_an_epoch_without_a_step_names_train_limit():
    with pytest.raises(DawnpipeError, match=r"train_limit 1 .* leaves 1 training item\(s\).*raise train_limit"):
        steps_per_epoch(1, 64, 1)
    with pytest.raises(DawnpipeError, match="the prepared data has 3 training item"):
        steps_per_epoch(3, 64, None, world_size=2)


def test_publishing_the_checkpoint_copies_it_and_keeps_the_work_copy(tmp_path):
    work, out = tmp_path / "work" / "threshold.pt", tmp_path / "out" / "model.pt"
    work.parent.mkdir()
    out.parent.mkdir()
    work.write_bytes(b"weights")
    publish_checkpoint(work, out)
    publish_checkpoint(work, out)  # a retry after a failure further on finds it again
    assert out.read_bytes() == work.read_bytes() == b"weights"
    assert sorted(p.name for p in out.parent.iterdir()) == ["model.pt"]  # no temporary left
    work.unlink()
    with pytest.raises(DawnpipeError, match="threshold checkpoint is missing from the work directory.*--no-resume"):
        publish_checkpoint(work, out)


def test_the_state_restores_the_host_generators_and_records_the_schedule():
    hp = {"lr": 0.4, "epochs": 10, "schedule": {"kind": "onecycle", "peak_epoch": 2}}
    random.seed(1)
    np.random.seed(2)
    state = common_state("h", 3, hp=hp, rows=[{"epoch": 1}], clock_seconds=5.0, wall_seconds=9.0)
    expected = (random.random(), np.random.random())
    random.seed(99)
    np.random.seed(99)
    import json

    state = json.loads(json.dumps(state))  # what the TensorFlow trainer stores: plain JSON
    assert restore_common(state) == ([{"epoch": 1}], 5.0, 9.0, 3)
    assert (random.random(), np.random.random()) == expected
    assert state["scheduler"]["next_epoch"] == 4 and state["scheduler"]["next_lr"] == lr_at(3.0, 0.4, hp["schedule"], 10)
    assert why_not_resumable(state, "h") is None
    assert "different configuration" in why_not_resumable(state, "other")
    assert "another version" in why_not_resumable({**state, "state_format": 1}, "h")


def test_a_demo_threshold_is_called_one_in_the_progress_and_not_converged_lines():
    row = {
        "epoch": 1,
        "hours": 0.001,
        "top1Accuracy": 80.0,
        "train_loss": 0.5,
        "epoch_train_seconds": 3.0,
        "items_per_second": 100.0,
        "lr": 0.1,
        "eval_seconds": 1.0,
    }
    demo = Logbook(("top1Accuracy",), "top1Accuracy", 75.0, demo=True)
    demo.add(row)
    assert "<- demo threshold 75 reached" in demo.progress_line(row, 4, True)
    official = Logbook(("top1Accuracy",), "top1Accuracy", 93.0)
    official.add(row)
    assert "demo" not in official.not_converged_message() and "< threshold 93.00" in official.not_converged_message()
    assert "< demo threshold 99.00" in Logbook(("top1Accuracy",), "top1Accuracy", 99.0, [row], demo=True).not_converged_message()
