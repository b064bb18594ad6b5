"""Drop-path (stochastic depth) in the CIFAR ResNets of both frameworks: the
identity at evaluation, the configured rate in training, the linear decay
with depth, and no parameters of its own (the same counts in both)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dawnpipe.models.torch_zoo import CifarResNet, build_model, drop_path, drop_rates


def test_the_rate_decays_linearly_to_the_configured_one_at_the_last_block():
    rates = drop_rates(9, 0.5)
    assert rates[-1] == pytest.approx(0.5) and rates[0] == pytest.approx(0.5 / 9)
    assert np.allclose(np.diff(rates), 0.5 / 9)
    model = CifarResNet(20, drop_path=0.3, in_channels=1)
    blocks = [m for m in model.modules() if hasattr(m, "drop")]
    assert [b.drop for b in blocks] == pytest.approx(drop_rates(9, 0.3))


def test_torch_drops_at_the_rate_in_training_and_is_the_identity_in_evaluation():
    torch.manual_seed(0)
    x = torch.ones(20000, 3)
    out = drop_path(x, 0.3, training=True)
    dropped = (out[:, 0] == 0).float().mean().item()
    assert dropped == pytest.approx(0.3, abs=0.015)
    assert torch.allclose(out[out[:, 0] != 0], torch.full((1,), 1 / 0.7))  # kept items scaled up: the expectation is unchanged
    assert drop_path(x, 0.3, training=False) is x
    plain, deep = build_model("resnet20", in_channels=1, num_classes=10), build_model("resnet20", in_channels=1, num_classes=10, drop_path=0.5)
    deep.load_state_dict(plain.state_dict())  # no parameters of its own: the same state loads
    plain.eval(), deep.eval()
    images = torch.randn(4, 1, 28, 28)
    assert torch.equal(plain(images), deep(images))
    deep.train()
    assert not torch.allclose(deep(images), plain.train()(images))


def test_keras_drop_path_matches_and_adds_no_parameters():
    import keras
    from test_tf_models import parameter_counts

    from dawnpipe.models import tf_zoo

    plain = tf_zoo.build_model("resnet20", input_shape=(28, 28, 1), num_classes=10)
    deep = tf_zoo.build_model("resnet20", input_shape=(28, 28, 1), num_classes=10, drop_path=0.5)
    torch_count = sum(p.numel() for p in build_model("resnet20", in_channels=1, num_classes=10, drop_path=0.5).parameters())
    assert parameter_counts(deep) == parameter_counts(plain) and parameter_counts(deep)["trainable"] == torch_count
    for layer in plain.layers:  # by name (the PyTorch module paths): the drop layers change the order of the weights
        if layer.weights:
            deep.get_layer(layer.name).set_weights(layer.get_weights())
    images = np.random.default_rng(0).normal(size=(4, 28, 28, 1)).astype("float32")
    assert np.array_equal(np.asarray(deep(images, training=False)), np.asarray(plain(images, training=False)))
    rates = [layer.rate for layer in deep.layers if isinstance(layer, tf_zoo.DropPath)]
    assert rates == pytest.approx(drop_rates(9, 0.5))
    layer = tf_zoo.DropPath(0.3)
    out = np.asarray(layer(np.ones((20000, 3), "float32"), training=True))
    assert (out[:, 0] == 0).mean() == pytest.approx(0.3, abs=0.015) and np.allclose(out[out[:, 0] != 0], 1 / 0.7)
    assert keras.saving.get_registered_object("dawnpipe>DropPath") is tf_zoo.DropPath
