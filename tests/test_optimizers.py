"""The trainers' optimizers (dawnpipe.train.optimizers) against torch.optim's
classes: the same weights after every step, bit for bit, under a schedule
that changes the learning rate each step, and under GradScaler with a step it
skips; the same state_dict; a state_dict of either continued by the other;
each recipe's optimizer built as torch.optim's class would be; and no
compiler imported by building and stepping them."""

from __future__ import annotations

import io
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from conftest import tool_env

from dawnpipe.train import optimizers
from dawnpipe.train.torch_base import build_optimizer

RECIPES = {
    "sgd-nesterov-decay": (
        lambda ps: optimizers.SGD(ps, lr=0.2, momentum=0.9, nesterov=True, weight_decay=5e-4),
        lambda ps: torch.optim.SGD(ps, lr=0.2, momentum=0.9, nesterov=True, weight_decay=5e-4),
    ),
    "sgd-plain": (
        lambda ps: optimizers.SGD(ps, lr=0.1, momentum=0.0, nesterov=False, weight_decay=0.0),
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.0, nesterov=False, weight_decay=0.0),
    ),
    "adam": (
        lambda ps: optimizers.Adam(ps, lr=1e-3, betas=(0.9, 0.999), weight_decay=1e-4, decoupled_weight_decay=False),
        lambda ps: torch.optim.Adam(ps, lr=1e-3, betas=(0.9, 0.999), weight_decay=1e-4),
    ),
    "adamw": (
        lambda ps: optimizers.Adam(ps, lr=1e-3, betas=(0.8, 0.999), weight_decay=0.05, decoupled_weight_decay=True),
        lambda ps: torch.optim.AdamW(ps, lr=1e-3, betas=(0.8, 0.999), weight_decay=0.05),
    ),
}


def model() -> torch.nn.Module:
    """A small net with a convolution, a batch norm and a parameter that never
    gets a gradient (torch.optim keeps no state for it)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 3))
    net.register_parameter("unused", torch.nn.Parameter(torch.ones(2)))
    return net


def train(net: torch.nn.Module, opt, steps: range) -> None:
    for step in steps:
        gen = torch.Generator().manual_seed(step)
        x, y = torch.randn(5, 1, 8, 8, generator=gen), torch.randint(0, 3, (5,), generator=gen)
        for group in opt.param_groups:
            group["lr"] = group["lr"] * 0.9
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()


def through_a_file(state_dict: dict) -> dict:
    """A state_dict as a checkpoint gives it back (no tensor shared with the optimizer that wrote it)."""
    buffer = io.BytesIO()
    torch.save(state_dict, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), name


def assert_same_state_dict(ours: dict, theirs: dict) -> None:
    assert ours["param_groups"] == theirs["param_groups"]
    assert list(ours["state"]) == list(theirs["state"])
    for position, state in theirs["state"].items():
        assert list(ours["state"][position]) == list(state), position
        for key, value in state.items():
            assert torch.equal(ours["state"][position][key], value) and ours["state"][position][key].dtype == value.dtype, (position, key)


@pytest.mark.parametrize("recipe", RECIPES)
def test_each_step_and_the_state_dict_are_torch_optims(recipe):
    ours_of, theirs_of = RECIPES[recipe]
    a, b = model(), model()
    ours, theirs = ours_of(a.parameters()), theirs_of(b.parameters())
    for step in range(6):
        train(a, ours, range(step, step + 1))
        train(b, theirs, range(step, step + 1))
        assert_same_weights(a, b)
    assert len(theirs.state) < len(list(b.parameters()))  # the unused parameter has no state
    assert_same_state_dict(ours.state_dict(), theirs.state_dict())


@pytest.mark.parametrize("recipe", RECIPES)
def test_a_state_dict_of_either_is_continued_by_the_other(recipe):
    """A checkpoint written with torch.optim resumes here, and the other way round."""
    ours_of, theirs_of = RECIPES[recipe]
    reference, resumed_here, resumed_there = model(), model(), model()
    opt = theirs_of(reference.parameters())
    train(reference, opt, range(3))
    here = ours_of(resumed_here.parameters())
    resumed_here.load_state_dict(reference.state_dict())
    here.load_state_dict(through_a_file(opt.state_dict()))
    started_here = model()
    first = ours_of(started_here.parameters())
    train(started_here, first, range(3))
    there = theirs_of(resumed_there.parameters())
    resumed_there.load_state_dict(started_here.state_dict())
    there.load_state_dict(through_a_file(first.state_dict()))
    for net, optimizer in ((reference, opt), (resumed_here, here), (resumed_there, there)):
        train(net, optimizer, range(3, 6))
    assert_same_weights(resumed_here, reference)
    assert_same_weights(resumed_there, reference)


@pytest.mark.parametrize("recipe", ["sgd-nesterov-decay", "adamw"])
def test_a_step_with_an_infinite_gradient_is_skipped_as_under_torch_optim(recipe):
    """GradScaler (enabled; fp16 on a GPU is where trainers use it) unscales
    the gradients through param_groups and skips the step that has an inf."""
    ours_of, theirs_of = RECIPES[recipe]
    nets = model(), model()
    opts = ours_of(nets[0].parameters()), theirs_of(nets[1].parameters())
    scalers = torch.amp.GradScaler("cpu", init_scale=1024.0), torch.amp.GradScaler("cpu", init_scale=1024.0)
    for step in range(4):
        gen = torch.Generator().manual_seed(step)
        x, y = torch.randn(5, 1, 8, 8, generator=gen), torch.randint(0, 3, (5,), generator=gen)
        before = [{k: v.clone() for k, v in net.state_dict().items()} for net in nets]
        for net, opt, scaler in zip(nets, opts, scalers):
            opt.zero_grad()
            scaler.scale(torch.nn.functional.cross_entropy(net(x), y)).backward()
            if step == 2:
                net[0].weight.grad.view(-1)[0] = float("inf")
            scaler.step(opt)
            scaler.update()
        assert_same_weights(*nets)
        weights_moved = not all(torch.equal(before[0][k], v) for k, v in nets[0].named_parameters())
        assert weights_moved == (step != 2), step
    assert scalers[0].get_scale() == scalers[1].get_scale() == 512.0  # halved once, for the skipped step


@pytest.mark.parametrize(
    "kind, theirs_of",
    [
        ("sgd", lambda ps: torch.optim.SGD(ps, lr=0.3, momentum=0.85, nesterov=True, weight_decay=1e-4)),
        ("adam", lambda ps: torch.optim.Adam(ps, lr=0.3, betas=(0.85, 0.999), weight_decay=1e-4)),
        ("adamw", lambda ps: torch.optim.AdamW(ps, lr=0.3, betas=(0.85, 0.999), weight_decay=1e-4)),
    ],
)
def test_each_recipe_optimizer_is_built_as_its_torch_optim_class(kind, theirs_of):
    recipe = SimpleNamespace(optimizer=kind, lr=0.3, momentum=0.85, nesterov=True, weight_decay=1e-4)
    assert build_optimizer(model(), recipe).state_dict() == theirs_of(model().parameters()).state_dict()


def test_a_state_dict_of_other_parameters_or_switches_is_refused_and_changes_nothing():
    opt = optimizers.SGD(model().parameters(), lr=0.1, momentum=0.9, nesterov=False, weight_decay=0.0)
    smaller = optimizers.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1, momentum=0.9, nesterov=False, weight_decay=0.0)
    with pytest.raises(ValueError, match=r"parameter groups of sizes \[2\], this optimizer has one group of 7"):
        opt.load_state_dict(smaller.state_dict())
    net = model()
    adam = optimizers.Adam(net.parameters(), lr=1e-3, betas=(0.9, 0.999), weight_decay=0.0, decoupled_weight_decay=False)
    amsgrad = torch.optim.Adam(model().parameters(), lr=0.5, amsgrad=True).state_dict()
    with pytest.raises(ValueError, match="optimizer state with amsgrad True; dawnpipe's optimizers implement False only"):
        adam.load_state_dict(amsgrad)
    stray = {**optimizers.SGD(model().parameters(), lr=0.5, momentum=0.9, nesterov=False, weight_decay=0.0).state_dict(), "state": {7: {}, -1: {}}}
    with pytest.raises(ValueError, match=r"optimizer state for parameters \[7, -1\], this optimizer has parameters 0 to 6"):
        opt.load_state_dict(stray)
    assert opt.param_groups[0]["lr"] == 0.1 and adam.param_groups[0]["lr"] == 1e-3 and not opt.state and not adam.state


def test_a_training_step_does_not_import_torchs_compiler():
    """What the module is for: no torch._dynamo in a process that builds an
    optimizer of each kind and steps it (torch.optim's classes import it)."""
    code = (
        "import sys, torch\n"
        "from dawnpipe.train import optimizers\n"
        "net = torch.nn.Linear(3, 2)\n"
        "for opt in (optimizers.SGD(net.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4),\n"
        "            optimizers.Adam(net.parameters(), lr=1e-3, betas=(0.9, 0.999), weight_decay=0.0, decoupled_weight_decay=True)):\n"
        "    net(torch.randn(4, 3)).sum().backward()\n"
        "    opt.step()\n"
        "    opt.zero_grad()\n"
        "print(sorted(m for m in sys.modules if m.startswith('torch._dynamo')))\n"
        "torch.optim.SGD(net.parameters(), lr=0.1)\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=tool_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["[]", "True"]  # none of ours; torch.optim's class, the control, does import it
