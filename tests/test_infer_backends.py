"""Each inference backend, exported and imported for real, answers as the
checkpoint does; batch-norm folding keeps the function; the check itself
fails on a changed model; the registry is consistent."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from infer_fixtures import make_checkpoint, random_items

from dawnpipe.errors import DawnpipeError
from dawnpipe.infer import backends
from dawnpipe.infer import torch_model as tm
from dawnpipe.infer.predictor import ATOL, RTOL, check_outputs

FAST = ["eager", "torchscript", "onnxruntime", "onnxruntime-int8"]
MODELS = {"fastnet": {"widths": [8, 16, 16, 32]}, "resnet20": {"width": 4}}


@pytest.fixture(scope="module", params=sorted(MODELS))
def checkpoint(request, tmp_path_factory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("ckpt") / "model.pt", model=request.param, model_args=MODELS[request.param])


CHECK_ITEMS, _ = random_items(80, seed=1)
CALIBRATION_ITEMS, _ = random_items(64, seed=2)


def prepare(name: str, checkpoint: Path, **extra):
    """The backend prepared as the infer command does it."""
    backend = backends.get_backend(name)
    if backend.calibrates:
        extra["calibration_items"] = CALIBRATION_ITEMS
    return backends.load_backend(backend).prepare(checkpoint, device="cpu", threads=1, check_items=CHECK_ITEMS, **extra)


def assert_answers_like_checkpoint(predictor, checkpoint: Path, *, exact: bool) -> None:
    reference = tm.reference_logits(tm.load_checkpoint(checkpoint), CHECK_ITEMS)
    answers = np.array([predictor.predict(x) for x in CHECK_ITEMS])  # the function that is timed
    top2 = np.sort(reference, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 2 * (ATOL + RTOL * np.abs(top2[:, 1]))  # items without a near-tie
    assert clear.sum() > len(clear) // 2
    agree = answers[clear] == reference.argmax(1)[clear]
    assert agree.all() if exact else agree.mean() >= 0.9


@pytest.mark.parametrize("name", FAST)
def test_backend_round_trip_equals_checkpoint(name, checkpoint):
    predictor = prepare(name, checkpoint)
    assert predictor.backend == name and predictor.threads == 1 and predictor.device == "cpu"
    check = predictor.export_check
    assert check["items"] == 64 and check["max_abs_diff"] <= ATOL  # the fp32 model, exported and loaded back
    assert predictor.notes["folded_batch_norms"] > 0 and predictor.notes["remaining_batch_norms"] == 0
    assert predictor.checkpoint["epoch"] == 3 and predictor.checkpoint["reached_threshold"] is True
    if name == "onnxruntime-int8":
        assert predictor.precision == "int8" and check["quantized_vs_fp32"]["items"] == 64
        assert_answers_like_checkpoint(predictor, checkpoint, exact=False)
    else:
        assert predictor.precision == "fp32"
        assert_answers_like_checkpoint(predictor, checkpoint, exact=True)
    # top-5 answers (ImageNet's): the five best ids, best first, the top-1 answer first
    top5 = prepare(name, checkpoint, topk=5)
    for item in CHECK_ITEMS[:8]:
        ids = top5.predict(item)
        assert isinstance(ids, list) and len(set(ids)) == 5 and ids[0] == predictor.predict(item)


def clear_items(checkpoint: Path) -> np.ndarray:
    """Items whose two best checkpoint logits are far apart (no near-tie that
    another order of floating-point operations could flip)."""
    reference = tm.reference_logits(tm.load_checkpoint(checkpoint), CHECK_ITEMS)
    top2 = np.sort(reference, axis=1)[:, -2:]
    return (top2[:, 1] - top2[:, 0]) > 2 * (ATOL + RTOL * np.abs(top2[:, 1]))


@pytest.mark.parametrize("name", FAST)
def test_backend_answers_a_batch_as_it_answers_one_item_at_a_time(name, checkpoint):
    """Throughput is measured on predict_batch: it must be the same answers,
    only batched (a batch axis exported dynamically, top-k per row)."""
    predictor = prepare(name, checkpoint)
    single = np.array([predictor.predict(x) for x in CHECK_ITEMS])
    clear = clear_items(checkpoint)
    for size in (1, 8, 64, len(CHECK_ITEMS)):
        batched = np.concatenate([predictor.predict_batch(CHECK_ITEMS[i : i + size]) for i in range(0, len(CHECK_ITEMS), size)])
        assert batched.shape == single.shape
        assert (batched[clear] == single[clear]).all(), f"batch of {size}"
    top5 = prepare(name, checkpoint, topk=5)
    rows = top5.predict_batch(CHECK_ITEMS[:8])
    assert [row[0] for row in rows] == [top5.predict(x)[0] for x in CHECK_ITEMS[:8]] and all(len(set(r)) == 5 for r in rows)


@pytest.mark.slow
def test_compile_backend_round_trip_equals_checkpoint(tmp_path):
    """torch.compile (TorchInductor) on this CPU: minutes of compiling on 2 cores."""
    ckpt = make_checkpoint(tmp_path / "model.pt", model="fastnet", model_args=MODELS["fastnet"])
    predictor = prepare("compile", ckpt)
    assert predictor.export_check["max_abs_diff"] <= ATOL
    assert_answers_like_checkpoint(predictor, ckpt, exact=True)


def test_folding_batch_norms_keeps_the_function(checkpoint):
    ckpt = tm.load_checkpoint(checkpoint)
    model = tm.trained_model(ckpt)
    folded, count = tm.fold_batch_norms(model)
    assert count == tm.count_batch_norms(model) > 0 and tm.count_batch_norms(folded) == 0
    x = torch.randn(4, 1, 28, 28)
    with torch.inference_mode():
        torch.testing.assert_close(folded(x), model(x), atol=1e-5, rtol=1e-4)
    assert tm.count_batch_norms(model) == count  # the original is untouched


def test_check_rejects_a_model_that_answers_differently():
    rng = np.random.default_rng(0)
    reference = rng.normal(size=(64, 10))
    assert check_outputs(reference, reference + 1e-5, backend="x")["max_abs_diff"] == pytest.approx(1e-5)
    changed = reference.copy()
    changed[17, 3] += 0.05
    with pytest.raises(DawnpipeError, match=r"backend onnxruntime: .*item 17, logit 3"):
        check_outputs(reference, changed, backend="onnxruntime")
    with pytest.raises(DawnpipeError, match="non-finite"):
        check_outputs(reference, np.full_like(reference, np.nan), backend="x")
    with pytest.raises(DawnpipeError, match="shape"):
        check_outputs(reference, reference[:, :5], backend="x")


def test_check_catches_a_wrong_preprocessing_step(checkpoint):
    """The check against the checkpoint is independent of InferenceNet: an
    inference net with the wrong normalisation is caught before timing."""
    ckpt = tm.load_checkpoint(checkpoint)
    module, _ = tm.inference_net(ckpt)
    module.std.mul_(2.0)
    with pytest.raises(DawnpipeError, match="disagrees with the checkpoint"):
        tm.check_against_checkpoint(ckpt, tm.as_logits_fn(module, torch.device("cpu")), CHECK_ITEMS, "eager")


def test_registry_modules_exist_and_are_selected_by_framework_and_items():
    for backend in backends.BACKENDS:
        assert importlib.util.find_spec(backend.module) is not None, backend.module
        if backend.framework == "pytorch":  # (importing TensorFlow here would cost more than the rest of the file)
            assert callable(importlib.import_module(backend.module).prepare), backend
    assert backends.default_backend("pytorch") == "eager" and backends.default_backend("tensorflow") == "tf-function"
    assert backends.backends_for("tensorflow", "image", ["eager", "tf-function"]) == ["tf-function"]
    assert backends.backends_for("pytorch", "image", ["onnxruntime", "eager"]) == ["onnxruntime", "eager"]
    assert set(backends.backends_for("pytorch", "image")) >= set(FAST) | {"compile"}
    assert backends.backends_for("pytorch", "question", ["onnxruntime", "eager"]) == ["eager"]
    assert backends.get_backend("eager", "question").module != backends.get_backend("eager", "image").module
    with pytest.raises(DawnpipeError, match="unknown inference backend 'tensorrt'"):
        backends.backends_for("pytorch", "image", ["tensorrt"])
    with pytest.raises(DawnpipeError, match="'torchscript' does not answer question items"):
        backends.get_backend("torchscript", "question")


def test_bad_checkpoint_is_a_clear_error(tmp_path):
    bad = tmp_path / "model.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(DawnpipeError, match=r"model.pt: not a readable PyTorch checkpoint"):
        tm.load_checkpoint(bad)
    torch.save({"state_dict": {}}, bad)
    with pytest.raises(DawnpipeError, match=r"model.pt: not a dawnpipe training checkpoint \(missing model"):
        tm.load_checkpoint(bad)
