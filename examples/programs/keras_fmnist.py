"""Fashion-MNIST in plain Keras 3 (TensorFlow backend), the recipe of torch_fmnist.py:
a narrow ResNet-9-style net (widths 16..128), batch 256, SGD (momentum 0.9, weight
decay 5e-4 as PyTorch applies it), one-cycle rate (linear from 0.1 x lr to lr over half
an epoch, then down to 0 at the end), no augmentation, mixed_bfloat16 where the hardware
has it, 4 epochs.

    python keras_fmnist.py --data FILE.npz --out OUT [--state DIR] [--seed 0]

FILE.npz: x_train, y_train, x_test, y_test as keras.datasets.fashion_mnist.load_data()
returns them. Each epoch's weights go to OUT/epoch<N>.weights.h5 before the epoch ends;
--state keeps a backup to continue from after an interruption (Keras' BackupAndRestore).
It logs MLLOG (mlperf_logging.mllog) as a benchmark reads it: run_start, and per epoch
N epoch_start/epoch_stop around its training.
"""

import argparse
import os
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf
from keras import layers
from mlperf_logging import mllog

MEAN, STD = 0.2860, 0.3530  # of Fashion-MNIST's training pixels / 255
INIT = keras.initializers.VarianceScaling(1 / 3, "fan_in", "uniform")  # PyTorch's default: U(+-1/sqrt(fan_in))


def conv_bn(x, width):
    x = layers.Conv2D(width, 3, padding="same", use_bias=False, kernel_initializer=INIT)(x)
    return layers.ReLU()(layers.BatchNormalization(momentum=0.9, epsilon=1e-5)(x))


def stage(x, width, residual):
    x = layers.MaxPooling2D()(conv_bn(x, width))
    return layers.Add()([x, conv_bn(conv_bn(x, width), width)]) if residual else x


def build_model(widths=(16, 32, 64, 128)):
    """Normalised images [batch, 28, 28, 1] -> prep conv, 3 conv-pool stages (+residual), max-pool, linear."""
    images = keras.Input((28, 28, 1), name="images")
    x = stage(stage(stage(conv_bn(images, widths[0]), widths[1], True), widths[2], False), widths[3], True)
    x = layers.Dense(10, use_bias=False, kernel_initializer=INIT)(layers.GlobalMaxPooling2D()(x))
    return keras.Model(images, layers.Rescaling(0.125, dtype="float32", name="logits")(x))


@keras.saving.register_keras_serializable("keras_fmnist")
class OneCycle(keras.optimizers.schedules.LearningRateSchedule):
    """Linear from 0.1 x peak to peak over `warmup` steps, then linear to 0 at `total` steps."""

    def __init__(self, peak, warmup, total):
        self.peak, self.warmup, self.total = peak, warmup, total

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        up = self.peak * (0.1 + 0.9 * step / self.warmup)
        return tf.where(step <= self.warmup, up, self.peak * tf.maximum(0.0, (self.total - step) / (self.total - self.warmup)))

    def get_config(self):
        return {"peak": self.peak, "warmup": self.warmup, "total": self.total}


class MLLog(keras.callbacks.Callback):
    """epoch_start/epoch_stop around each epoch's training, the epoch's weights written before its end."""

    def __init__(self, out):
        super().__init__()
        self.out, self.log = out, mllog.get_mllogger()

    def on_epoch_begin(self, epoch, logs=None):
        self.log.start(key="epoch_start", metadata={"epoch_num": epoch + 1})

    def on_epoch_end(self, epoch, logs=None):
        self.model.save_weights(self.out / f"epoch{epoch + 1}.weights.h5")
        self.log.end(key="epoch_stop", metadata={"epoch_num": epoch + 1})
        print(f"epoch {epoch + 1}: loss {logs['loss']:.3f}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", type=Path, required=True, help="fashion_mnist.npz (x_train, y_train, x_test, y_test)")
    p.add_argument("--out", type=Path, required=True, help="directory for epoch<N>.weights.h5")
    p.add_argument("--state", type=Path, help="directory for a backup to continue from")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.2, help="peak learning rate")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: TensorFlow's default)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if tf.config.list_physical_devices("GPU") else "cpu")
    p.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto", help="mixed_bfloat16 or float32 (auto: bf16 where the hardware has it)")
    args = p.parse_args()

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    if args.device == "cpu":
        tf.config.set_visible_devices([], "GPU")
    keras.utils.set_random_seed(args.seed)  # Python, NumPy and TensorFlow
    if args.precision == "auto":  # bf16 on GPUs from Ampere on and on CPUs with AVX512-BF16 or AMX
        gpus = tf.config.list_physical_devices("GPU") if args.device == "cuda" else []
        cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
        if gpus:
            args.precision = "bf16" if tf.config.experimental.get_device_details(gpus[0]).get("compute_capability", (0, 0)) >= (8, 0) else "fp32"
        else:
            args.precision = "bf16" if "avx512_bf16" in cpuinfo or "amx_bf16" in cpuinfo else "fp32"
    if args.precision == "bf16":
        keras.mixed_precision.set_global_policy("mixed_bfloat16")

    with np.load(args.data) as data:
        train_x = ((data["x_train"].astype(np.float32) / 255 - MEAN) / STD)[..., None]  # [N, 28, 28, 1]
        train_y = data["y_train"].astype(np.int64)
    model = build_model()
    steps = -(-len(train_x) // args.batch_size)
    schedule = OneCycle(args.lr, warmup=steps / 2, total=args.epochs * steps)
    # weight decay as PyTorch's SGD applies it through the momentum (5e-4 / (1 - 0.9)): Keras's is decoupled
    optimizer = keras.optimizers.SGD(schedule, momentum=0.9, weight_decay=5e-3)
    # XLA (jit_compile) was slower on this CPU; Keras's "auto" would turn it on with a GPU, untested here
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=False)
    print(f"keras_fmnist: {len(train_x)} training items, {args.epochs} epochs of {steps} steps, {args.precision}", flush=True)

    log = mllog.get_mllogger()
    log.event(key="global_batch_size", value=args.batch_size)
    log.start(key="run_start")
    # the backup first: an epoch is backed up before its epoch_stop is logged
    callbacks = ([keras.callbacks.BackupAndRestore(str(args.state))] if args.state else []) + [MLLog(args.out)]
    model.fit(train_x, train_y, batch_size=args.batch_size, epochs=args.epochs, shuffle=True, verbose=0, callbacks=callbacks)
    log.end(key="run_stop", metadata={"status": "success"})


if __name__ == "__main__":
    main()
