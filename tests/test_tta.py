"""Time-to-accuracy and cost arithmetic, on logs whose answers are worked out by hand."""

import math

import pytest

from dawnpipe.metrics.tta import cost_usd, inference_cost_per_10k, time_to_accuracy

EPOCHS = [1, 2, 3, 4, 5]
HOURS = [0.01, 0.02, 0.03, 0.04, 0.05]
ACC = [80.0, 92.5, 93.0, 92.0, 94.0]


def test_first_epoch_at_or_above_the_threshold_wins():
    tta = time_to_accuracy(EPOCHS, HOURS, ACC, 93.0)
    # epoch 3 is exactly at the threshold: it counts, and later epochs do not matter
    assert (tta.reached, tta.row, tta.epoch, tta.hours, tta.metric) == (True, 2, 3.0, 0.03, 93.0)
    assert tta.best_metric == 94.0


def test_a_dip_below_after_reaching_does_not_move_the_time():
    assert time_to_accuracy(EPOCHS, HOURS, ACC, 92.5).epoch == 2


def test_never_reached():
    tta = time_to_accuracy(EPOCHS, HOURS, ACC, 94.5)
    assert not tta.reached and tta.hours is None and tta.epoch is None
    assert tta.best_metric == 94.0


def test_nan_metrics_are_skipped():
    tta = time_to_accuracy([1, 2], [0.1, 0.2], [math.nan, 95.0], 93.0)
    assert tta.epoch == 2 and tta.best_metric == 95.0


def test_fractional_epochs():
    tta = time_to_accuracy([0.5, 1.0, 1.5], [0.1, 0.2, 0.3], [90.0, 93.5, 94.0], 93.0)
    assert tta.epoch == 1.0 and tta.hours == 0.2


def test_lengths_must_agree():
    with pytest.raises(ValueError):
        time_to_accuracy([1], [0.1, 0.2], [90.0], 93.0)


def test_training_cost_is_hours_times_price():
    assert cost_usd(0.5, 3.06) == pytest.approx(1.53)
    assert cost_usd(None, 3.06) is None
    assert cost_usd(0.5, None) is None  # unknown price: no cost, not zero


def test_inference_cost_per_10k_items():
    # 1 ms per item at $3.60/h: 10,000 items take 10 s = 1/360 h -> $0.01
    assert inference_cost_per_10k(1.0, 3.6) == pytest.approx(0.01)
    # the CIFAR-10 record latency on a p3.2xlarge
    assert inference_cost_per_10k(0.1345, 3.06) == pytest.approx(0.1345 / 3.6e6 * 3.06 * 1e4)
    assert inference_cost_per_10k(1.0, None) is None
