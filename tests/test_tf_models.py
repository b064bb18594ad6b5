"""The Keras ResNets are the PyTorch ones: same parameter count, and the same
function once they hold the same weights (which also checks layer order,
strides, padding, batch-norm epsilon and the shortcut projections)."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import torch
from infer_fixtures import scramble_batch_norm

from dawnpipe.models import tf_zoo, torch_zoo


def parameter_counts(model: keras.Model) -> dict[str, int]:
    """Trainable parameters (PyTorch's ``parameters()``) and non-trainable state
    (batch-norm moving statistics: PyTorch's float buffers) of a Keras model."""

    def count(variables):
        return int(sum(math.prod(v.shape) for v in variables))

    return {"trainable": count(model.trainable_weights), "non_trainable": count(model.non_trainable_weights)}


def torch_counts(model) -> dict[str, int]:
    params = sum(p.numel() for p in model.parameters())
    # float buffers = batch-norm running mean/var; num_batches_tracked has no Keras twin
    stats = sum(b.numel() for name, b in model.named_buffers() if not name.endswith("num_batches_tracked"))
    return {"trainable": params, "non_trainable": stats}


def load_torch_weights(keras_model, torch_model) -> int:
    """Copy a PyTorch state_dict into the Keras model by layer name; returns the tensors copied."""
    sd = {k: v.detach().numpy() for k, v in torch_model.state_dict().items() if not k.endswith("num_batches_tracked")}
    used = set()
    for layer in keras_model.layers:
        if isinstance(layer, keras.layers.Conv2D):
            names = [f"{layer.name}.weight"]
            layer.set_weights([sd[names[0]].transpose(2, 3, 1, 0)])  # OIHW -> HWIO
        elif isinstance(layer, keras.layers.BatchNormalization):
            names = [f"{layer.name}.{n}" for n in ("weight", "bias", "running_mean", "running_var")]
            layer.set_weights([sd[n] for n in names])
        elif isinstance(layer, keras.layers.Dense):
            names = [f"{layer.name}.weight", f"{layer.name}.bias"]
            layer.set_weights([sd[names[0]].T, sd[names[1]]])
        else:
            continue
        used.update(names)
    assert used == set(sd), f"PyTorch tensors without a Keras twin: {sorted(set(sd) - used)}"
    return len(used)


@pytest.mark.parametrize("name, in_channels, classes", [("resnet20", 1, 10), ("resnet32", 3, 10), ("resnet164", 3, 100)])
def test_parameter_counts_equal_pytorch(name, in_channels, classes):
    tm = torch_zoo.build_model(name, in_channels=in_channels, num_classes=classes)
    km = tf_zoo.build_model(name, input_shape=(32, 32, in_channels), num_classes=classes)
    assert parameter_counts(km) == torch_counts(tm)
    if name == "resnet20" and in_channels == 1:
        assert torch_counts(tm)["trainable"] == 272_186  # He et al.'s 0.27M, with a 1-channel stem


@pytest.mark.parametrize("name, shape", [("resnet20", (28, 28, 1)), ("resnet20", (32, 32, 3))])
def test_same_weights_give_the_same_logits(name, shape):
    torch.manual_seed(0)
    h, w, c = shape
    tm = scramble_batch_norm(torch_zoo.build_model(name, in_channels=c, num_classes=10)).eval()
    km = tf_zoo.build_model(name, input_shape=shape, num_classes=10)
    load_torch_weights(km, tm)
    x = np.random.default_rng(1).normal(size=(3, c, h, w)).astype(np.float32)
    with torch.no_grad():
        expected = tm(torch.from_numpy(x)).numpy()
    got = np.asarray(km(x.transpose(0, 2, 3, 1), training=False))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_keras_padding_same_would_not_be_the_same_network():
    """Why tf_zoo pads strided convolutions itself: with Keras' padding="same"
    a stride-2 3x3 convolution samples another pixel grid than PyTorch's."""
    x = np.arange(36, dtype=np.float32).reshape(1, 6, 6, 1)
    kernel = np.zeros((3, 3, 1, 1), np.float32)
    kernel[1, 1] = 1.0  # picks the centre pixel of each window
    same = keras.layers.Conv2D(1, 3, strides=2, padding="same", use_bias=False)
    same.build(x.shape)
    same.set_weights([kernel])
    torch_like = torch.nn.functional.conv2d(torch.from_numpy(x.transpose(0, 3, 1, 2)), torch.from_numpy(kernel.transpose(3, 2, 0, 1)), stride=2, padding=1)
    assert not np.array_equal(np.asarray(same(x))[..., 0], torch_like.numpy()[:, 0])
    padded = keras.Sequential([keras.layers.ZeroPadding2D(1), keras.layers.Conv2D(1, 3, strides=2, padding="valid", use_bias=False)])
    padded.build(x.shape)
    padded.layers[1].set_weights([kernel])
    assert np.array_equal(np.asarray(padded(x))[..., 0], torch_like.numpy()[:, 0])


def test_unknown_model_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown Keras model 'fastnet'.*resnet20"):
        tf_zoo.build_model("fastnet", input_shape=(28, 28, 1), num_classes=10)
    with pytest.raises(ValueError, match="6n \\+ 2, not 21"):
        tf_zoo.build_model("resnet21", input_shape=(28, 28, 1), num_classes=10)
