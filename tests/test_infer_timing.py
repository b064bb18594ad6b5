"""The timing loop and the latency statistics (docs/rules.md#3-inference-latency).

The loop is tested with a cost profile known exactly (a virtual clock that
the "model" advances), so every statistic has one right value; and once on a
real tiny PyTorch model with the real clock, where only robust relations
between items of very different known cost are asserted (never a speed)."""

from __future__ import annotations

import numpy as np
import pytest

from dawnpipe.infer.latency import latency_stats
from dawnpipe.infer.timing import time_items


class VirtualClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_latency_stats_are_numpy_percentiles_and_total_over_items():
    ms = np.arange(1, 101, dtype=float)  # 1..100 ms
    stats = latency_stats(ms / 1000.0)
    assert stats["latency_mean_ms"] == pytest.approx(50.5)
    assert stats["latency_p50_ms"] == pytest.approx(50.5)
    assert stats["latency_p90_ms"] == pytest.approx(90.1)
    assert stats["latency_p99_ms"] == pytest.approx(99.01)
    assert stats["latency_max_ms"] == pytest.approx(100.0)
    with pytest.raises(ValueError):
        latency_stats([])


def test_loop_times_each_item_excludes_warmup_and_keeps_item_order():
    # cost profile in ms: 90 items of 1, 9 of 10, one of 100, shuffled; the
    # first call ever costs 1000 extra (lazy initialisation).
    rng = np.random.default_rng(0)
    costs = rng.permutation([1.0] * 90 + [10.0] * 9 + [100.0])
    items = list(range(100))
    clock = VirtualClock()
    calls = []

    def predict(i):
        clock.now += (costs[i] + (1000.0 if not calls else 0.0)) / 1000.0
        calls.append(i)
        return i % 10

    times = time_items(predict, items, warmup=5, clock=clock)
    assert calls[:5] == [0, 1, 2, 3, 4] and calls[5:] == items  # warm-up first, then every item once, in order
    np.testing.assert_allclose(times.warmup_seconds * 1000, [costs[0] + 1000.0, *costs[1:5]])
    np.testing.assert_allclose(times.seconds * 1000, costs)  # item i's own cost, nothing of the warm-up
    assert times.answers == [i % 10 for i in items]
    stats = latency_stats(times.seconds)
    assert stats["latency_mean_ms"] == pytest.approx((90 * 1 + 9 * 10 + 100) / 100)
    assert stats["latency_p50_ms"] == pytest.approx(1.0)
    assert stats["latency_p90_ms"] == pytest.approx(1.0 + 0.1 * 9)  # between the 90th (1 ms) and 91st (10 ms) sorted
    assert stats["latency_p99_ms"] == pytest.approx(10.0 + 0.01 * 90)
    assert stats["latency_max_ms"] == pytest.approx(100.0)


def test_device_sync_stand_in_puts_queued_work_inside_each_item():
    """A stand-in for a CUDA device (none here): predict only queues work and
    returns at once, like a kernel launch; sync() waits for the queue. The
    clock must stop after the item's queued work, and start after earlier work."""
    clock = VirtualClock()
    queued = [0.0]

    def predict(cost_ms):
        queued[0] += cost_ms / 1000.0  # launch: costs nothing on the host
        return 0

    def sync():
        clock.now += queued[0]
        queued[0] = 0.0

    costs = [3.0, 1.0, 7.0, 2.0]
    with_sync = time_items(predict, costs, warmup=2, sync=sync, clock=clock)
    np.testing.assert_allclose(with_sync.seconds * 1000, costs)
    without_sync = time_items(predict, costs, warmup=0, clock=clock)
    assert without_sync.seconds.max() == 0.0  # what an unsynchronised timer would (wrongly) report


def test_real_tiny_model_costs_land_on_their_own_items():
    """A real PyTorch model whose cost per item is known: "heavy" items (first
    value 1) run its layer 64 times, "light" ones once. Per-item times must
    show it item by item (robust medians, a 64x cost difference, 8x asserted)."""
    import torch

    torch.manual_seed(0)
    layer = torch.nn.Linear(128, 128)
    heavy = np.zeros(60, dtype=bool)
    heavy[::4] = True  # 15 heavy, 45 light, interleaved
    items = [np.full(128, float(h), dtype=np.float32) for h in heavy]

    @torch.inference_mode()
    def predict(item):
        x = torch.from_numpy(item)[None]
        for _ in range(64 if item[0] == 1.0 else 1):
            x = torch.tanh(layer(x))
        return int(x.argmax())

    times = time_items(predict, items, warmup=3)
    assert len(times.seconds) == len(items) and (times.seconds > 0).all()
    assert np.median(times.seconds[heavy]) > 8 * np.median(times.seconds[~heavy])
    assert latency_stats(times.seconds)["latency_mean_ms"] == pytest.approx(times.seconds.sum() * 1000 / len(items))
