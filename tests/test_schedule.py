import pytest

from dawnpipe.train.schedule import lr_at

STEP = {"kind": "step", "warmup_epochs": 5, "warmup_lr": 0.01, "milestones": [15, 23], "gamma": 0.1}
ONECYCLE = {"kind": "onecycle", "peak_epoch": 2, "start_fraction": 0.1, "end_fraction": 0.0}


@pytest.mark.parametrize(("epoch", "lr"), [(0, 0.01), (4.99, 0.01), (5, 0.1), (14.9, 0.1), (15, 0.01), (23, 0.001), (29.9, 0.001)])
def test_dawnbench_step_schedule(epoch, lr):
    assert lr_at(epoch, 0.1, STEP, 30) == pytest.approx(lr)


@pytest.mark.parametrize(("epoch", "lr"), [(0, 0.02), (1, 0.11), (2, 0.2), (6, 0.1), (10, 0.0), (12, 0.0)])
def test_one_cycle_is_piecewise_linear(epoch, lr):
    assert lr_at(epoch, 0.2, ONECYCLE, 10) == pytest.approx(lr)


@pytest.mark.parametrize(("epoch", "lr"), [(0, 0.02), (2, 0.2), (2.5, 0.2), (3, 0.2), (3.5, 0.1), (4, 0.0), (5, 0.0)])
def test_one_cycle_holds_its_peak_until_decay_epoch(epoch, lr):
    assert lr_at(epoch, 0.2, {**ONECYCLE, "decay_epoch": 3}, 4) == pytest.approx(lr)


def test_a_decay_epoch_before_the_peak_is_no_hold():
    for epoch in (0.5, 2, 6, 10):
        assert lr_at(epoch, 0.2, {**ONECYCLE, "decay_epoch": 1}, 10) == lr_at(epoch, 0.2, ONECYCLE, 10)


def test_constant_and_unknown():
    assert lr_at(3.3, 0.05, {"kind": "constant"}, 10) == 0.05
    with pytest.raises(ValueError):
        lr_at(0, 0.1, {"kind": "cosine"}, 10)
