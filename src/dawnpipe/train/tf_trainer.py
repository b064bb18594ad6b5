"""TensorFlow (Keras) trainer: one entry, one seed; the contract of
``torch_trainer`` (same prepared data, logs, clock, checkpoint, summary).

The one training loop (dawnpipe.train.loop) around one ``tf.function`` step
rather than ``model.fit``: the learning rate is ``schedule.lr_at`` of the
fractional epoch at every step (as in PyTorch), the clock brackets exactly
the epoch, and evaluation and checkpointing run between epochs with the clock
stopped, not inside callbacks whose time ``fit`` would mix into its own.

The training clock (docs/rules.md#1-training-time) covers each epoch's loop:
shuffling, augmentation, forward, backward and the optimizer step, and in the
first epoch (and the first after a resume) the tracing of the step into a
graph: that is what training costs in TensorFlow. On a GPU the clock is read
only after ``sync`` (all queued kernels done). The data set is on the device
once, as uint8, before the clock starts; batches are gathered and augmented
inside the graph.

Same recipe as PyTorch, by construction:
- Model: ``tf_zoo``, layer for layer ``torch_zoo`` (tests compare outputs).
- Weight decay as PyTorch's SGD/Adam do it (L2 added to the gradient, here as
  ``wd/2 * sum(w^2)`` in the loss, over every trainable variable); AdamW's is
  decoupled in both (Keras' ``weight_decay``). Adam's epsilon is PyTorch's 1e-8.
- Keras' SGD keeps ``lr * gradient`` in its velocity, PyTorch keeps the bare
  gradient and multiplies by the current rate. They agree while the rate is
  constant; at a step of the schedule Keras' velocity carries the old rate for
  a few steps (0.9^k). We keep the framework's own optimizer: that difference
  is part of what a framework comparison measures.
- Batch norm's moving variance: Keras updates it with the biased batch
  variance, PyTorch with the unbiased one (a factor n/(n-1) per update).
- ``channels_last`` is always true in effect: TensorFlow's CPU convolutions
  are NHWC only.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dawnpipe import tf_runtime
from dawnpipe.data.loader import ShardedArray, Split, evaluation_sets, held_out_size, load_split
from dawnpipe.errors import DawnpipeError
from dawnpipe.tasks import get_task
from dawnpipe.train import EntryError, loop, naming_the_model
from dawnpipe.train.finish import FinishedRun
from dawnpipe.train.interruptions import StopRequest
from dawnpipe.train.logbook import Logbook, extra_set_summary, extra_set_text, held_out_columns
from dawnpipe.train.outputs import Outputs
from dawnpipe.train.schedule import lr_at, steps_per_epoch
from dawnpipe.train.settings import Entry, Recipe, RunSettings

tf = tf_runtime.tf


def as_nhwc(images: np.ndarray) -> np.ndarray:
    x = np.array(images)  # a writable copy of the memory map
    return x[..., None] if x.ndim == 3 else x


def check_entry(entry: Entry) -> None:
    """What can be checked before any data is read (train.cli calls it): what
    this trainer does not implement, and the model and its model_args (checked,
    not built: building would start TensorFlow before its threads are set)."""
    from dawnpipe.models.tf_zoo import model_spec

    if entry.recipe.augment.resized_crop_size:
        raise EntryError("hyperparameters.augment.random_resized_crop is not implemented by the TensorFlow trainer")
    with naming_the_model(entry.model, entry.model_args):
        model_spec(entry.model, **entry.model_args)


def model_from_entry(entry: Entry, *, image_shape: tuple[int, ...], num_classes: int):
    """The entry's Keras network; an unknown ``model`` or a bad ``model_args`` is an error naming both."""
    from dawnpipe.models.tf_zoo import build_model

    with naming_the_model(entry.model, entry.model_args):
        return build_model(entry.model, input_shape=image_shape, num_classes=num_classes, **entry.model_args)


def check_supported(entry: Entry, split: Split) -> None:
    """What the data asks that this trainer does not do: say so, by name."""
    if isinstance(split.images, ShardedArray):
        raise DawnpipeError(
            f"entry {entry.id}: the TensorFlow trainer keeps the data set in memory; "
            f"{entry.task} is prepared in shards (too large), which only the PyTorch trainer streams"
        )


def channel_stats(images: np.ndarray, chunk: int = 10000) -> tuple[list[float], list[float]]:
    """Per-channel mean and (unbiased, like torch.std) std of uint8 NHWC images scaled to [0, 1]."""
    c = images.shape[-1]
    total, total_sq, n = np.zeros(c), np.zeros(c), 0
    for start in range(0, images.shape[0], chunk):
        x = images[start : start + chunk].reshape(-1, c).astype(np.float64) / 255.0
        total += x.sum(axis=0)
        total_sq += np.square(x).sum(axis=0)
        n += x.shape[0]
    mean = total / n
    var = (total_sq - n * mean**2) / (n - 1)
    return mean.tolist(), np.sqrt(np.maximum(var, 0.0)).tolist()


def set_precision(precision: str, device: str) -> None:
    import keras

    if precision == "fp16" and not tf_runtime.device_label(device).startswith("cuda"):
        raise DawnpipeError("precision fp16 needs a CUDA device (use bf16 on CPUs)")
    keras.mixed_precision.set_global_policy(tf_runtime.POLICIES[precision])


def build_optimizer(recipe: Recipe):
    import keras

    if recipe.optimizer == "sgd":
        opt = keras.optimizers.SGD(learning_rate=recipe.lr, momentum=recipe.momentum, nesterov=recipe.nesterov)
    elif recipe.optimizer == "adam":
        opt = keras.optimizers.Adam(learning_rate=recipe.lr, beta_1=recipe.momentum, beta_2=0.999, epsilon=1e-8)
    else:
        opt = keras.optimizers.AdamW(learning_rate=recipe.lr, weight_decay=recipe.weight_decay, beta_1=recipe.momentum, beta_2=0.999, epsilon=1e-8)
    return keras.optimizers.LossScaleOptimizer(opt) if recipe.precision == "fp16" else opt


def augment(x, pad: int, flip: bool, gen):
    """Per-item random crop (after zero padding) and horizontal flip of a float NHWC batch."""
    n, h, w = tf.shape(x)[0], x.shape[1], x.shape[2]
    if pad:
        xp = tf.pad(x, [[0, 0], [pad, pad], [pad, pad], [0, 0]])
        dy = gen.uniform([n], 0, 2 * pad + 1, dtype=tf.int32)
        dx = gen.uniform([n], 0, 2 * pad + 1, dtype=tf.int32)
        rows = tf.range(h)[None, :] + dy[:, None]
        cols = tf.range(w)[None, :] + dx[:, None]
        x = tf.gather(xp, rows, axis=1, batch_dims=1)
        x = tf.gather(x, cols, axis=2, batch_dims=1)
    if flip:
        mask = gen.uniform([n]) < 0.5
        x = tf.where(mask[:, None, None, None], tf.reverse(x, axis=[2]), x)
    return x


def make_steps(model, optimizer, recipe: Recipe, gen, train_x, train_y, mean, std, image_shape):
    """(train_step(idx, lr) -> summed cross-entropy of the batch, eval_logits(uint8 batch) -> float32 logits)."""
    mean = tf.constant(mean, tf.float32)
    std = tf.constant(std, tf.float32)
    aug = recipe.augment
    n_classes = model.output_shape[-1]
    smoothing = recipe.label_smoothing
    l2 = recipe.weight_decay if recipe.optimizer != "adamw" else 0.0  # coupled L2, as torch's weight_decay
    fp16 = recipe.precision == "fp16"

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32), tf.TensorSpec([], tf.float32)])
    def train_step(idx, lr):
        x = tf.cast(tf.gather(train_x, idx), tf.float32) / 255.0
        x = (augment(x, aug.crop_padding, aug.flip, gen) - mean) / std
        y = tf.one_hot(tf.cast(tf.gather(train_y, idx), tf.int32), n_classes)
        if smoothing:
            y = y * (1.0 - smoothing) + smoothing / n_classes
        with tf.GradientTape() as tape:
            logits = tf.cast(model(x, training=True), tf.float32)
            ce = tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=logits)
            loss = tf.reduce_mean(ce)
            if l2:
                loss += 0.5 * l2 * tf.add_n([tf.reduce_sum(tf.square(v)) for v in model.trainable_variables])
            if fp16:
                loss = optimizer.scale_loss(loss)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.learning_rate.assign(lr)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return tf.reduce_sum(ce)

    @tf.function(input_signature=[tf.TensorSpec([None, *image_shape], tf.uint8)])
    def eval_logits(images):
        x = (tf.cast(images, tf.float32) / 255.0 - mean) / std
        logits = tf.cast(model(x, training=False), tf.float32)
        if recipe.tta_flip:
            logits += tf.cast(model(tf.reverse(x, axis=[2]), training=False), tf.float32)
        return logits

    return train_step, eval_logits


def evaluate(eval_logits, images, labels: np.ndarray, recipe: Recipe, metric_columns) -> tuple[dict[str, float], float]:
    """Metrics in percent for ``metric_columns`` (top1Accuracy/top5Accuracy) and the mean loss."""
    ks = tuple(k for k, col in ((1, "top1Accuracy"), (5, "top5Accuracy")) if col in metric_columns) or (1,)
    correct = dict.fromkeys(ks, 0)
    loss_sum = 0.0
    bs = recipe.eval_batch_size
    for start in range(0, labels.shape[0], bs):
        logits = eval_logits(images[start : start + bs]).numpy()
        y = labels[start : start + bs].astype(np.int64)
        z = logits / (2.0 if recipe.tta_flip else 1.0)
        z = z - z.max(axis=1, keepdims=True)
        loss_sum += float((np.log(np.exp(z).sum(axis=1)) - z[np.arange(len(y)), y]).sum())
        top = np.argsort(-logits, axis=1, kind="stable")[:, : max(ks)]
        hits = top == y[:, None]
        for k in ks:
            correct[k] += int(hits[:, :k].any(axis=1).sum())
    n = labels.shape[0]
    metrics = {col: 100.0 * correct[k] / n for k, col in ((1, "top1Accuracy"), (5, "top5Accuracy")) if k in correct}
    return metrics, loss_sum / n


def save_state(path: Path, meta: dict[str, Any], model, optimizer, gen) -> None:
    arrays = {
        **tf_runtime.variable_arrays("model", model.weights),
        **tf_runtime.variable_arrays("optimizer", optimizer.variables),
        "generator": gen.state.numpy(),
    }
    tf_runtime.save_npz(path, meta, arrays)


def load_state(path: Path, model, optimizer, gen) -> dict[str, Any]:
    meta, arrays = tf_runtime.load_npz(path)
    tf_runtime.assign_variables(model.weights, arrays, "model", path)
    tf_runtime.assign_variables(optimizer.variables, arrays, "optimizer", path)
    gen.state.assign(arrays["generator"])
    return meta


def train(settings: RunSettings, data_dir: Path, out: Outputs, *, threads: int | None = None, resume: bool = True) -> FinishedRun | None:
    """Train one entry with one seed; what it did. SIGTERM or
    SIGUSR1 stops it at the next step (dawnpipe.train.interruptions)."""
    with StopRequest().active() as stop:
        trainer = KerasTrainer(settings, data_dir, threads=threads)
        task = trainer.task
        logbook = Logbook(
            task.log_columns, task.metric_column, settings.threshold, demo=settings.demo_threshold, extra_columns=held_out_columns(settings.entry.document)
        )
        return loop.run(trainer, settings, out, logbook, resume=resume, stop=stop)


class KerasTrainer:
    """A Keras image classifier's epoch, evaluation and state (the loop's Trainer)."""

    is_main, distributed = True, False
    state_file, threshold_file = "last.npz", "threshold.npz"

    def __init__(self, settings: RunSettings, data_dir: Path, *, threads: int | None):
        entry, recipe = settings.entry, settings.entry.recipe
        self.settings, self.recipe, self.task = settings, recipe, get_task(entry.task)
        # Every thread to each op (intra), ops one after another (inter = 1, Intel's
        # advice for one socket): with as many threads as cores, two convolutions at
        # once would only fight over the same cores.
        tf_runtime.configure_threads(threads, 1 if threads else None)
        self.device = tf_runtime.pick_device(entry.device)
        self.gen = tf_runtime.seed_everything(settings.seed)
        set_precision(recipe.precision, self.device)

        held = held_out_size(entry.document)
        train_split = load_split(data_dir, "train", settings.train_limit, held_out=held)
        test_split = load_split(data_dir, "test", settings.test_limit)
        check_supported(entry, train_split)
        # the held-out split (never trained on) and the task's new test set, scored at every evaluation
        self.extra_sets = [(prefix, as_nhwc(split.images), np.array(split.labels), about) for prefix, split, about in evaluation_sets(data_dir, entry.document)]
        train_np, test_np = as_nhwc(train_split.images), as_nhwc(test_split.images)
        self.test_labels = np.array(test_split.labels)
        mean, std = (list(train_split.stats["mean"]), list(train_split.stats["std"])) if train_split.stats else channel_stats(train_np)
        n_classes = len(train_split.classes)
        image_shape = tuple(int(d) for d in train_np.shape[1:])
        with tf.device(self.device):
            # tf.constant lives on the host; tf.identity under the scope puts a copy on the device
            train_x, train_y = tf.identity(tf.constant(train_np)), tf.identity(tf.constant(np.array(train_split.labels)))
            self.test_x = tf.identity(tf.constant(test_np))
            self.model = model_from_entry(entry, image_shape=image_shape, num_classes=n_classes)
            self.optimizer = build_optimizer(recipe)
            self.optimizer.build(self.model.trainable_variables)
            self.train_step, self.eval_logits = make_steps(self.model, self.optimizer, recipe, self.gen, train_x, train_y, mean, std, image_shape)
        self.n_train, self.batch = int(train_x.shape[0]), recipe.batch_size
        self.steps = steps_per_epoch(self.n_train, self.batch, settings.train_limit)
        self.checkpoint_meta = {
            "entry_id": entry.id,
            "task": self.task.name,
            "framework": "tensorflow",
            "model": entry.model,
            "model_args": entry.model_args,
            "image_shape": list(image_shape),
            "num_classes": n_classes,
            "mean": mean,
            "std": std,
            "precision": recipe.precision,
            "channels_last": True,
            "tta_flip": recipe.tta_flip,
            "threshold": settings.threshold,
            "metric": self.task.metric_column,
        }
        self.environment = _environment(self.device)

    def describe(self) -> str:
        s, env = self.settings, self.environment
        return (
            f"train: {s.label} on {env['device']} (TensorFlow {tf.__version__}, "
            f"{env['threads']} intra-op / {env['interop_threads']} inter-op threads): "
            f"{self.n_train} training items, {self.test_x.shape[0]} test items{extra_set_text([(p, len(y), a) for p, _, y, a in self.extra_sets])}, "
            f"{self.recipe.epochs} epochs of {self.steps} steps, "
            f"threshold {self.task.metric_column} >= {s.threshold:g}" + (" (demo threshold)" if s.demo_threshold else "")
        )

    def sync(self) -> None:
        tf_runtime.sync(self.device)

    def any_rank(self, flag: bool) -> bool:
        return flag

    def barrier(self) -> None:
        pass

    def epoch(self, epoch: int, steps: loop.Steps) -> loop.EpochResult:
        recipe, lr = self.recipe, self.recipe.lr
        with tf.device(self.device):
            perm = tf.argsort(self.gen.uniform([self.n_train]))
            losses = []
            for step in range(self.steps):
                if not steps.keep_going(step):
                    return loop.EpochResult(0.0, 0, lr, interrupted=True)
                lr = lr_at(epoch + step / self.steps, recipe.lr, recipe.schedule, recipe.epochs)
                idx = perm[step * self.batch : (step + 1) * self.batch]
                losses.append(self.train_step(idx, lr))
            return loop.EpochResult(float(tf.add_n(losses)), min(self.steps * self.batch, self.n_train), lr)

    def evaluate(self) -> tuple[dict[str, float], float]:
        metrics, loss = evaluate(self.eval_logits, self.test_x, self.test_labels, self.recipe, self.task.log_columns)
        column = self.task.metric_column
        for i, (prefix, images, labels, about) in enumerate(self.extra_sets):
            if not tf.is_tensor(images):  # on the device once
                with tf.device(self.device):
                    images = tf.identity(tf.constant(images))
                self.extra_sets[i] = (prefix, images, labels, about)
            extra, _ = evaluate(self.eval_logits, images, labels, self.recipe, (column,))
            metrics[prefix + column] = extra[column]
        return metrics, loss

    def save_state(self, path: Path, common: dict[str, Any]) -> None:
        save_state(path, common, self.model, self.optimizer, self.gen)

    def read_state(self, path: Path) -> tuple[dict[str, Any], Callable[[], None]]:
        meta, _ = tf_runtime.load_npz(path)
        return meta, lambda: load_state(path, self.model, self.optimizer, self.gen)

    def save_threshold(self, path: Path, row: dict[str, Any], reached: bool) -> None:
        meta = {**self.checkpoint_meta, "epoch": row["epoch"], "metric_value": row[self.task.metric_column], "reached_threshold": reached}
        tf_runtime.save_checkpoint(path, meta, self.model)

    def progress_suffix(self, row: dict[str, Any]) -> str:
        return ""

    def summary(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "train_items": self.n_train,
            **extra_set_summary([(prefix, len(labels), about) for prefix, _, labels, about in self.extra_sets]),
            "test_items": int(self.test_x.shape[0]),
            "environment": self.environment,
        }


def _environment(device: str) -> dict[str, Any]:
    from dawnpipe.runinfo import tf_environment

    return tf_environment(device)
