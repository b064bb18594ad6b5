"""Throughput beside latency (dawnpipe.infer.throughput): with a cost profile
known exactly (a virtual clock the "model" advances), items per second have
one right value at every batch size; batches wrap around a short inference
set; answers that differ from the one-at-a-time answers are counted."""

from __future__ import annotations

import numpy as np
import pytest

from dawnpipe.infer.throughput import batch_of, measure_throughput


class VirtualClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_items_per_second_follow_a_known_cost_profile():
    # a batch of b costs 2 ms fixed + 0.5 ms per item: items/s = b / (0.002 + 0.0005 b)
    clock = VirtualClock()
    seen: list[list[int]] = []

    def predict_batch(batch):
        clock.now += 0.002 + 0.0005 * len(batch)
        seen.append(list(batch))
        return [int(x) % 10 for x in batch]

    items = np.arange(100)
    out = measure_throughput(predict_batch, items, single_answers=[i % 10 for i in range(100)], batch_sizes=(1, 8, 64, 256), min_seconds=0.05, clock=clock)
    per = out["throughput_items_per_second"]
    assert list(per) == ["1", "8", "64", "256"]
    for b in (1, 8, 64, 256):
        assert per[str(b)] == pytest.approx(b / (0.002 + 0.0005 * b))
        d = out["throughput"][str(b)]
        assert d["answers_differing"] == 0 and d["items"] == d["batches"] * b
        assert d["seconds"] >= 0.05 and d["batches"] >= 3
        assert d["seconds"] == pytest.approx(d["batches"] * (0.002 + 0.0005 * b))  # the warm-up batch is not timed
    assert per["256"] > per["64"] > per["8"] > per["1"]  # the fixed cost is spread over more items
    # a batch of 256 from 100 items wraps around, in order
    assert seen[-1][:3] == [(seen[-2][-1] + k) % 100 for k in (1, 2, 3)]


def test_answers_differing_from_one_at_a_time_are_counted():
    clock = VirtualClock()

    def predict_batch(batch):
        clock.now += 0.001
        return [0 if len(batch) > 1 else int(x) for x in batch]  # batches always answer 0

    items = np.arange(10)
    out = measure_throughput(predict_batch, items, single_answers=list(range(10)), batch_sizes=(1, 8), min_seconds=0.0, clock=clock)
    assert out["throughput"]["1"]["answers_differing"] == 0
    assert out["throughput"]["8"]["answers_differing"] == 7  # items 1..7 of the first batch of 8


def test_a_backend_that_drops_answers_is_an_error():
    with pytest.raises(ValueError, match="a batch of 8 items got 7 answers"):
        measure_throughput(lambda batch: list(batch)[:-1], np.arange(20), batch_sizes=(8,), min_seconds=0.0)


def test_batches_of_lists_and_arrays():
    assert batch_of([("q", "c")] * 3, 2, 4) == [("q", "c")] * 4
    a = np.arange(12).reshape(6, 2)
    np.testing.assert_array_equal(batch_of(a, 4, 4), a[[4, 5, 0, 1]])
    b = batch_of(a, 1, 3)
    assert b.flags["C_CONTIGUOUS"] and (b == a[1:4]).all()


def test_a_sharded_image_set_is_batched_into_one_array(tmp_path):
    """ImageNet's test set stays on disk as shards (ShardedArray, not an
    ndarray): a batch was a list of images and torch.from_numpy refused it
    (every backend failed in config/test-imagenet.yaml)."""
    from dawnpipe.data.loader import ShardedArray

    images = np.arange(5 * 4 * 4 * 3, dtype=np.uint8).reshape(5, 4, 4, 3)
    shards = []
    for i, part in enumerate((images[:3], images[3:])):
        np.save(tmp_path / f"s{i}.npy", part)
        shards.append(np.load(tmp_path / f"s{i}.npy", mmap_mode="r"))
    sharded = ShardedArray(shards)
    assert not isinstance(sharded, np.ndarray)
    batch = batch_of(sharded, 2, 4)
    assert isinstance(batch, np.ndarray) and batch.shape == (4, 4, 4, 3)
    np.testing.assert_array_equal(batch, images[[2, 3, 4, 0]])
