"""Keras models of the benchmark entries: the same networks as
``dawnpipe.models.torch_zoo``, layer for layer.

- ``resnet`` (``resnet20`` ... ``resnet110``, ``resnet164``): the CIFAR ResNets
  of He et al. (2016); basic blocks (depth = 6n + 2) or bottlenecks
  (depth = 9n + 2), 1x1-conv + batch-norm projection shortcuts.

What "the same" takes in Keras, and why:
- Layer names are the PyTorch module paths of ``CifarResNet``
  (``features.3.body.0``, ``head``), so a PyTorch ``state_dict`` maps onto
  the Keras weights one to one; the tests load one into the other and compare
  the outputs, which checks the architecture, not just its size.
- Strided 3x3 convolutions get explicit symmetric zero padding: Keras'
  ``padding="same"`` pads an even input only at the bottom/right when the
  stride is 2, which would shift the body's sampling grid one pixel away from
  the shortcut's (PyTorch pads 1 on every side).
- Batch norm uses PyTorch's momentum and epsilon (Keras' defaults are 0.99 and
  1e-3; PyTorch's 0.1 is Keras' 0.9). Keras counts the moving mean/variance as
  non-trainable parameters; PyTorch keeps them as buffers. The trainable
  parameter count equals PyTorch's ``sum(p.numel() for p in parameters())``.
- Initialisation as in PyTorch: Kaiming-normal (fan-out, ReLU) convolutions,
  and PyTorch's default uniform(+-1/sqrt(fan_in)) for the linear head.
- Layout is NHWC (TensorFlow's only convolution layout on CPUs).
"""

from __future__ import annotations

import inspect
import math

from dawnpipe.tensorflow_import import tensorflow

tensorflow()  # Keras runs on TensorFlow, loaded after triton (dawnpipe.tensorflow_import)
import keras  # noqa: E402
from keras import layers  # noqa: E402

BN_MOMENTUM = 0.9  # PyTorch BatchNorm2d(momentum=0.1): moving = 0.9 * moving + 0.1 * batch
BN_EPSILON = 1e-5  # PyTorch's default


def conv_bn(x, c_out: int, kernel: int, stride: int, name: str, bn_name: str):
    """Conv (no bias) + batch norm with PyTorch's padding ``kernel // 2`` on every side."""
    if stride > 1 and kernel > 1:
        x = layers.ZeroPadding2D(kernel // 2, name=f"{name}.pad")(x)
        padding = "valid"
    else:
        padding = "same"  # stride 1, odd kernel: symmetric, as in PyTorch
    x = layers.Conv2D(
        c_out,
        kernel,
        strides=stride,
        padding=padding,
        use_bias=False,
        name=name,
        kernel_initializer=keras.initializers.VarianceScaling(2.0, mode="fan_out", distribution="untruncated_normal"),
    )(x)
    return layers.BatchNormalization(momentum=BN_MOMENTUM, epsilon=BN_EPSILON, name=bn_name)(x)


@keras.saving.register_keras_serializable(package="dawnpipe")
class DropPath(layers.Layer):
    """Stochastic depth per sample, as torch_zoo.drop_path: in training each
    item's residual branch is zeroed with probability ``rate`` and the kept
    ones scaled by 1 / (1 - rate); the identity at inference. No weights."""

    def __init__(self, rate: float, **kwargs):
        super().__init__(**kwargs)
        self.rate = float(rate)

    def call(self, x, training=None):
        if not training or self.rate == 0.0:
            return x
        keep = 1.0 - self.rate
        shape = (keras.ops.shape(x)[0],) + (1,) * (len(x.shape) - 1)  # one draw per item
        mask = keras.ops.cast(keras.random.uniform(shape, dtype=x.dtype) < keep, x.dtype)
        return x * mask / keep

    def get_config(self):
        return {**super().get_config(), "rate": self.rate}


def _residual(y, short, path: str, drop: float):
    if drop:
        y = DropPath(drop, name=f"{path}.drop")(y)
    return layers.ReLU(name=f"{path}.relu")(layers.Add(name=f"{path}.add")([y, short]))


def basic_block(x, c_in: int, width: int, stride: int, path: str, drop: float = 0.0) -> tuple:
    c_out = width
    y = conv_bn(x, width, 3, stride, f"{path}.body.0", f"{path}.body.1")
    y = layers.ReLU(name=f"{path}.body.2")(y)
    y = conv_bn(y, c_out, 3, 1, f"{path}.body.3", f"{path}.body.4")
    short = conv_bn(x, c_out, 1, stride, f"{path}.shortcut.0", f"{path}.shortcut.1") if stride != 1 or c_in != c_out else x
    return _residual(y, short, path, drop), c_out


def bottleneck_block(x, c_in: int, width: int, stride: int, path: str, drop: float = 0.0) -> tuple:
    c_out = width * 4
    y = conv_bn(x, width, 1, 1, f"{path}.body.0", f"{path}.body.1")
    y = layers.ReLU(name=f"{path}.body.2")(y)
    y = conv_bn(y, width, 3, stride, f"{path}.body.3", f"{path}.body.4")
    y = layers.ReLU(name=f"{path}.body.5")(y)
    y = conv_bn(y, c_out, 1, 1, f"{path}.body.6", f"{path}.body.7")
    short = conv_bn(x, c_out, 1, stride, f"{path}.shortcut.0", f"{path}.shortcut.1") if stride != 1 or c_in != c_out else x
    return _residual(y, short, path, drop), c_out


def cifar_resnet(
    depth: int = 20,
    block: str = "basic",
    width: int = 16,
    drop_path: float = 0.0,
    *,
    input_shape: tuple[int, int, int],
    num_classes: int = 10,
    name: str | None = None,
) -> keras.Model:
    block_fn, per_block = {"basic": (basic_block, 2), "bottleneck": (bottleneck_block, 3)}[block]
    if (depth - 2) % (3 * per_block):
        raise ValueError(f"a {block} CIFAR ResNet needs depth = {3 * per_block}n + 2, not {depth}")
    n = (depth - 2) // (3 * per_block)
    inputs = keras.Input(shape=input_shape, name="image")
    x = conv_bn(inputs, width, 3, 1, "features.0", "features.1")
    x = layers.ReLU(name="features.2")(x)
    c_in, index = width, 3
    rates = iter([drop_path * (i + 1) / (3 * n) for i in range(3 * n)])  # the linear decay rule of torch_zoo.drop_rates
    for stage, w in enumerate((width, 2 * width, 4 * width)):
        for i in range(n):
            x, c_in = block_fn(x, c_in, w, 2 if stage > 0 and i == 0 else 1, f"features.{index}", next(rates))
            index += 1
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    bound = 1.0 / math.sqrt(c_in)  # PyTorch's nn.Linear default
    logits = layers.Dense(
        num_classes,
        name="head",
        kernel_initializer=keras.initializers.VarianceScaling(1.0 / 3.0, mode="fan_in", distribution="uniform"),
        bias_initializer=keras.initializers.RandomUniform(-bound, bound),
    )(x)
    return keras.Model(inputs, logits, name=name or f"resnet{depth}")


def build_model(name: str, *, input_shape: tuple[int, int, int], num_classes: int, **kwargs) -> keras.Model:
    """The Keras twin of ``torch_zoo.build_model`` (input_shape is H, W, C)."""
    depth, kwargs = model_spec(name, **kwargs)
    return cifar_resnet(depth, input_shape=tuple(input_shape), num_classes=num_classes, **kwargs)


def model_spec(name: str, **kwargs) -> tuple[int, dict]:
    """(depth, keyword arguments of ``cifar_resnet``) for a model name and its
    model_args, checked without building anything (building would start
    TensorFlow's runtime, whose threads can be set only before it starts):
    ValueError for an unknown name, block or depth, TypeError for an unknown key."""
    if not (name.startswith("resnet") and name[6:].isdigit()):
        raise ValueError(f"unknown Keras model {name!r} (known: resnet20/32/44/56/110 basic, resnet164 bottleneck)")
    depth = int(name[6:])
    kwargs.setdefault("block", "bottleneck" if depth == 164 else "basic")
    inspect.signature(cifar_resnet).bind(depth, input_shape=(32, 32, 3), **kwargs)  # TypeError names an unexpected key
    per_block = {"basic": 2, "bottleneck": 3}.get(kwargs["block"])
    if per_block is None:
        raise ValueError(f"block {kwargs['block']!r}: known blocks are basic and bottleneck")
    if (depth - 2) % (3 * per_block):
        raise ValueError(f"a {kwargs['block']} CIFAR ResNet needs depth = {3 * per_block}n + 2, not {depth}")
    return depth, kwargs
