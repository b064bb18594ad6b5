"""Fashion-MNIST in plain Keras 3 (TensorFlow backend), the recipe of torch_fmnist.py:
a narrow ResNet-9-style net (widths 16..128), batch 256, SGD (momentum 0.9, weight
decay 5e-4 as PyTorch applies it), one-cycle rate (linear from 0.1 x lr to lr over half
an epoch, then down to 0 at the end), no augmentation, mixed_bfloat16, 4 epochs:
93.27-93.45% top-1 at epoch 4 on a 2-core CPU (seeds 0, 0, 1; 91.7-92.3% at epoch 3;
TensorFlow on CPU is not bit-reproducible, so a seed's runs differ slightly).

    python keras_fmnist.py --data PREPARED --out OUT [--seed 0] [--threshold 93]

PREPARED: manifest.json and its .npy arrays (uint8 images N x 28 x 28, uint8 labels).
Stdout: MLLOG lines (":::MLLOG {json}"): run_start once loaded and built; per epoch N,
epoch_start/epoch_stop around its training (a Keras callback), then eval_start,
eval_accuracy (top-1 % on the whole test split), eval_stop; run_stop after the last
epoch (status "success" if --threshold was reached or none given, else "aborted").

In each evaluation window it writes the TensorFlow SavedModel OUT/epoch<N>.savedmodel/
(a temporary directory, renamed; the weights only, no optimizer state, no saver ops).
Its one signature "serving_default" takes one input "images": float32 [batch, 28, 28],
raw 0-255 pixels (the model normalises; it computes in the training precision), and
returns {"logits": float32 [batch, 10]}; the batch axis is dynamic:
    tf.saved_model.load(path).signatures["serving_default"](images=x)["logits"]
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # SavedModels need the TensorFlow backend
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf
from keras import layers


def mllog(key, value=None, event="POINT_IN_TIME", **metadata):  # one line as mlperf_logging.mllog writes it
    meta = {"file": __file__, "lineno": sys._getframe(1).f_lineno, **metadata}
    record = {"namespace": "", "time_ms": int(time.time() * 1000), "event_type": event, "key": key, "value": value, "metadata": meta}
    print(":::MLLOG " + json.dumps(record), flush=True)


INIT = keras.initializers.VarianceScaling(1 / 3, "fan_in", "uniform")  # PyTorch's default: U(+-1/sqrt(fan_in))


def conv_bn(x, width):
    x = layers.Conv2D(width, 3, padding="same", use_bias=False, kernel_initializer=INIT)(x)
    return layers.ReLU()(layers.BatchNormalization(momentum=0.9, epsilon=1e-5)(x))


def stage(x, width, residual):
    x = layers.MaxPooling2D()(conv_bn(x, width))
    return layers.Add()([x, conv_bn(conv_bn(x, width), width)]) if residual else x


def build_model(mean, std, widths=(16, 32, 64, 128)):
    """Pixels [batch, 28, 28] (0-255) -> normalise, prep conv, 3 conv-pool stages (+residual), max-pool, linear."""
    images = keras.Input((28, 28), name="images")
    x = layers.Rescaling(1 / (255.0 * std), offset=-mean / std)(layers.Reshape((28, 28, 1))(images))  # (pixels / 255 - mean) / std
    x = stage(stage(stage(conv_bn(x, widths[0]), widths[1], True), widths[2], False), widths[3], True)
    x = layers.Dense(10, use_bias=False, kernel_initializer=INIT)(layers.GlobalMaxPooling2D()(x))
    return keras.Model(images, layers.Rescaling(0.125, dtype="float32", name="logits")(x))


class OneCycle(keras.optimizers.schedules.LearningRateSchedule):
    """Linear from 0.1 x peak to peak over `warmup` steps, then linear to 0 at `total` steps."""

    def __init__(self, peak, warmup, total):
        self.peak, self.warmup, self.total = peak, warmup, total

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        up = self.peak * (0.1 + 0.9 * step / self.warmup)
        return tf.where(step <= self.warmup, up, self.peak * tf.maximum(0.0, (self.total - step) / (self.total - self.warmup)))


class Serving(tf.Module):
    """What the SavedModel holds: the model's weights (not the optimizer's state) and its one signature."""

    def __init__(self, model):
        super().__init__()
        self.weights = list(model.weights)  # tracked: saved
        self.predict = lambda images: model(images, training=False)  # a plain function: not tracked

    @tf.function(input_signature=[tf.TensorSpec([None, 28, 28], tf.float32, name="images")])
    def serve(self, images):
        return {"logits": tf.cast(self.predict(images), tf.float32)}


class MLLog(keras.callbacks.Callback):
    """epoch_start/epoch_stop around each epoch's training; then the evaluation and the SavedModel."""

    def __init__(self, test_x, test_y, out, threshold):
        super().__init__()
        self.test_x, self.test_y, self.out, self.threshold, self.reached = test_x, test_y, out, threshold, False

    def on_epoch_begin(self, epoch, logs=None):
        mllog("epoch_start", event="INTERVAL_START", epoch_num=epoch + 1)
        self.t0 = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.perf_counter() - self.t0
        mllog("epoch_stop", event="INTERVAL_END", epoch_num=epoch + 1)
        mllog("eval_start", event="INTERVAL_START", epoch_num=epoch + 1)
        logits = self.model.predict(self.test_x, batch_size=1000, verbose=0)
        accuracy = 100.0 * float(np.mean(logits.argmax(1) == self.test_y))
        tmp, final = self.out / f".epoch{epoch + 1}.savedmodel.tmp", self.out / f"epoch{epoch + 1}.savedmodel"
        module = Serving(self.model)
        # no saver ops in the graph (SaveV2 and co.): a reader only serves it, and may refuse ops that write files
        options = tf.saved_model.SaveOptions(experimental_skip_saver=True)
        tf.saved_model.save(module, str(tmp), signatures={"serving_default": module.serve}, options=options)
        os.replace(tmp, final)
        self.reached = self.reached or (self.threshold is not None and accuracy >= self.threshold)
        mllog("eval_accuracy", accuracy, epoch_num=epoch + 1)
        mllog("eval_stop", event="INTERVAL_END", epoch_num=epoch + 1)
        print(f"epoch {epoch + 1}: loss {logs['loss']:.3f}, top-1 {accuracy:.2f}%, {seconds:.1f} s training", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", type=Path, required=True, help="prepared Fashion-MNIST directory (manifest.json)")
    p.add_argument("--out", type=Path, required=True, help="directory for epoch<N>.savedmodel")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.2, help="peak learning rate")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: TensorFlow's default)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if tf.config.list_physical_devices("GPU") else "cpu")
    p.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto", help="mixed_bfloat16 or float32 (auto: bf16 where the hardware has it)")
    p.add_argument("--threshold", type=float, default=None, help="top-1 percent that counts as success")
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

    def load(split):
        entry = json.loads((args.data / "manifest.json").read_text())["splits"][split]
        images, labels = (np.load(args.data / entry[k]["file"], allow_pickle=False) for k in ("images", "labels"))
        return images.astype(np.float32), labels.astype(np.int64)

    (train_x, train_y), (test_x, test_y) = load("train"), load("test")
    pixels = train_x / 255.0
    model = build_model(float(pixels.mean()), float(pixels.std()))
    del pixels
    steps = -(-len(train_x) // args.batch_size)
    schedule = OneCycle(args.lr, warmup=steps / 2, total=args.epochs * steps)
    # weight decay as PyTorch's SGD applies it through the momentum (5e-4 / (1 - 0.9)): Keras's is decoupled
    optimizer = keras.optimizers.SGD(schedule, momentum=0.9, weight_decay=5e-3)
    # XLA (jit_compile) was slower on this CPU; Keras's "auto" would turn it on with a GPU, untested here
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=False)
    print(f"keras_fmnist: {len(train_x)} training items, {len(test_x)} test items, {args.epochs} epochs of {steps} steps, {args.precision}", flush=True)

    mllog("global_batch_size", args.batch_size)
    mllog("train_samples", len(train_x))  # items per epoch: dawnpipe's items/s
    mllog("run_start", event="INTERVAL_START")
    callback = MLLog(test_x, test_y, args.out, args.threshold)
    model.fit(train_x, train_y, batch_size=args.batch_size, epochs=args.epochs, shuffle=True, verbose=0, callbacks=[callback])
    mllog("run_stop", event="INTERVAL_END", status="success" if callback.reached or args.threshold is None else "aborted")


if __name__ == "__main__":
    main()
