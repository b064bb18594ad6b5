"""The reference entries of the DAWNBench tasks validate and build the
networks the papers describe (parameter counts of He et al. 2016 and of the
ResNet-9 of the fast CIFAR-10 entries)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT

ENTRIES = ROOT / "config" / "entries"

# entry id -> (task, parameters in millions, rounded as the papers print them)
REFERENCE = {
    "resnet20-cifar10": ("cifar10", 0.27),
    "resnet56-cifar10": ("cifar10", 0.86),
    "resnet110-cifar10": ("cifar10", 1.7),
    "resnet164-cifar10": ("cifar10", 1.7),
    "resnet164-basic-cifar10": ("cifar10", 2.6),
    "fastnet-cifar10": ("cifar10", 6.6),
    "resnet50-imagenet": ("imagenet", 25.6),
}


@pytest.mark.parametrize("entry_id", sorted(REFERENCE))
def test_reference_entry_builds_the_published_network(entry_id):
    from dawnpipe.entries import load_entry
    from dawnpipe.models.torch_zoo import build_model
    from dawnpipe.tasks import get_task

    entry = load_entry(ENTRIES / f"{entry_id}.yaml")
    task, millions = REFERENCE[entry_id]
    assert entry["task"] == task
    classes = 1000 if task == "imagenet" else len(get_task(task).data["classes"])
    model = build_model(entry["model"], in_channels=3, num_classes=classes, **entry["model_args"])
    assert round(sum(p.numel() for p in model.parameters()) / 1e6, 2 if millions < 1 else 1) == millions


def test_seed_recipe_is_the_dawnbench_one():
    from dawnpipe.entries import load_entry

    for entry_id in ("resnet20-cifar10", "resnet56-cifar10", "resnet110-cifar10", "resnet164-cifar10", "resnet164-basic-cifar10"):
        hp = load_entry(ENTRIES / f"{entry_id}.yaml")["hyperparameters"]
        assert (hp["optimizer"], hp["momentum"], hp["weight_decay"], hp["batch_size"]) == ("sgd", 0.9, 0.0005, 128)
        assert (hp["schedule"]["warmup_epochs"], hp["schedule"]["warmup_lr"], hp["lr"]) == (5, 0.01, 0.1)
        assert hp["augment"]["crop_padding"] == 4 and hp["augment"]["flip"]


@pytest.mark.parametrize("path", sorted((ENTRIES / "smoke").glob("*.yaml")), ids=lambda p: Path(p).stem)
def test_smoke_entries_are_valid_cpu_entries(path):
    from dawnpipe.entries import load_entry

    entry = load_entry(path)
    assert entry["device"] == "cpu" and entry["hardware"] == "local-cpu" and entry["hyperparameters"]["epochs"] <= 2
