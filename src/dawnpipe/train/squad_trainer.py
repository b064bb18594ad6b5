"""SQuAD v1.1 trainer (PyTorch): one reader entry, one seed; the same contract as
``dawnpipe.train.torch_trainer`` (Outputs, per-epoch TSV ``epoch, hours,
f1Score`` with F1 a 0..1 fraction, Parquet log, threshold checkpoint,
stop_at_threshold, resumable work directory, summary dict).

    python -m dawnpipe train --entry config/entries/drqa.yaml --seed 0 --data data/prepared/squad \\
        --tsv results/runs/drqa/seed0/train.tsv ...    # train.cli picks this module for SQuAD entries

The training clock covers, per step, assembling the padded batch from the
prepared arrays, the host-to-device copy, forward, backward and the optimizer
step (like augmentation in the image trainer); evaluating dev F1 (the official
SQuAD v1.1 metric on the answer *texts*, ``dawnpipe.squad.evaluate``) and
checkpointing run with the clock stopped (dawnpipe.train.loop owns the clock).

Reader options in the entry's ``model_args`` besides the network's own
(``dawnpipe.models.squad_reader``): ``vocab_size`` / ``min_word_count`` (words
kept from the training vocabulary), ``char_vocab_size``, ``max_answer_tokens``
(decoding), ``pretrained_embeddings`` (path of a *local* GloVe-format text
file, ``word v1 ... vD`` per line, to initialise the word embeddings) and
``fix_embeddings`` (keep them frozen).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from dawnpipe.data.squad import SquadSplit, load_squad, load_vocab
from dawnpipe.errors import DawnpipeError
from dawnpipe.models.squad_reader import best_spans, build_reader
from dawnpipe.squad.evaluate import score_answer
from dawnpipe.squad.text import TOKENIZER, kept_size, pad_batch
from dawnpipe.tasks import get_task
from dawnpipe.train import EntryError, loop
from dawnpipe.train.distributed import SINGLE
from dawnpipe.train.finish import FinishedRun
from dawnpipe.train.interruptions import StopRequest
from dawnpipe.train.logbook import Logbook
from dawnpipe.train.outputs import Outputs
from dawnpipe.train.schedule import lr_at
from dawnpipe.train.settings import Entry, Recipe, RunSettings
from dawnpipe.train.torch_base import TorchTrainer, autocast, build_optimizer, check_optimizer, pick_device, seed_everything

READER_ARGS = {
    "vocab_size": None,
    "min_word_count": 1,
    "char_vocab_size": None,
    "max_answer_tokens": 15,
    "pretrained_embeddings": None,
    "fix_embeddings": False,
}
BUCKET_BATCHES = 20  # batches drawn together and sorted by context length (less padding, still random)


def reader_settings(entry: Entry) -> tuple[dict[str, Any], dict[str, Any]]:
    """(reader options, network constructor arguments) from the entry's model_args."""
    args = dict(entry.model_args)
    reader = {k: args.pop(k, default) for k, default in READER_ARGS.items()}
    return reader, args


def check_entry(entry: Entry) -> None:
    """What can be checked before any data is read (train.cli calls it): the
    recipe, the reader built on the meta device (which allocates nothing; the
    vocabulary sizes are placeholders until the data is read) and the
    pretrained embeddings file."""
    check_recipe(entry)
    check_optimizer(entry.recipe)
    reader, net_args = reader_settings(entry)
    with torch.device("meta"):
        try:
            build_reader(entry.model, 100, 50, **net_args)
        except DawnpipeError as e:  # an unknown model, a bad model_args key
            raise EntryError(str(e)) from None
    if reader["pretrained_embeddings"] and not Path(reader["pretrained_embeddings"]).is_file():
        raise EntryError(f"model_args.pretrained_embeddings: {reader['pretrained_embeddings']}: no such file")


def check_recipe(entry: Entry) -> None:
    """Refuse what this trainer does not do rather than silently ignoring it."""
    recipe = entry.recipe
    if entry.framework != "pytorch":
        raise EntryError(f"framework {entry.framework}: the SQuAD reader is implemented in PyTorch only")
    image_only = [
        k
        for k, on in (
            ("augment.crop_padding", recipe.augment.crop_padding),
            ("augment.flip", recipe.augment.flip),
            ("tta_flip", recipe.tta_flip),
            ("channels_last", recipe.channels_last),
            ("label_smoothing", recipe.label_smoothing),
        )
        if on
    ]
    if image_only:
        raise EntryError(f"hyperparameters {', '.join(image_only)} apply to images, not to a SQuAD reader; remove them")
    if entry.layout.world_size != 1:
        raise EntryError("distributed: data-parallel training is not implemented for the SQuAD reader (nodes x processes_per_node must be 1)")


def batch_order(lengths: np.ndarray, batch_size: int, gen: torch.Generator) -> list[np.ndarray]:
    """Random batches of similar context length: shuffle, sort chunks of
    BUCKET_BATCHES batches by length, cut into batches, shuffle the batches."""
    perm = torch.randperm(len(lengths), generator=gen).numpy()
    chunk = batch_size * BUCKET_BATCHES
    batches = []
    for start in range(0, len(perm), chunk):
        part = perm[start : start + chunk]
        part = part[np.argsort(lengths[part], kind="stable")]
        batches.extend(part[i : i + batch_size] for i in range(0, len(part), batch_size))
    shuffle = torch.randperm(len(batches), generator=gen).tolist()
    return [batches[i] for i in shuffle]


def to_device(batch: dict[str, np.ndarray], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(v).to(device, non_blocking=True) for k, v in batch.items()}


def forward(model, t: dict[str, torch.Tensor]):
    return model(t["c_words"], t["c_chars"], t["c_feat"], t["c_mask"], t["q_words"], t["q_chars"], t["q_mask"])


def span_loss(start_logits, end_logits, t, reduction="mean"):
    return F.cross_entropy(start_logits, t["start"], reduction=reduction) + F.cross_entropy(end_logits, t["end"], reduction=reduction)


@torch.inference_mode()
def evaluate(model, split: SquadSplit, vocab_sizes: tuple[int, int], device, recipe: Recipe, max_answer_tokens: int) -> tuple[dict[str, float], float]:
    """Official SQuAD v1.1 exact match and F1 (fractions) of the predicted answer
    texts, and the mean span loss over the questions with an aligned answer."""
    model.eval()
    lengths = np.array([split.context_length(i) for i in range(len(split))])
    order = np.argsort(lengths, kind="stable")
    em_sum = f1_sum = loss_sum = 0.0
    aligned = 0
    for start in range(0, len(order), recipe.eval_batch_size):
        idx = order[start : start + recipe.eval_batch_size]
        examples = [split.example(int(i), *vocab_sizes) for i in idx]
        t = to_device(pad_batch(examples), device)
        with autocast(device, recipe.precision):
            start_logits, end_logits = forward(model, t)
        firsts, lasts = best_spans(start_logits, end_logits, max_answer_tokens)
        for i, first, last in zip(idx.tolist(), firsts.tolist(), lasts.tolist()):
            em, f1 = score_answer(split.answer_text(i, first, last), split.questions[i]["answers"])
            em_sum += em
            f1_sum += f1
        keep = t["start"] >= 0
        if bool(keep.any()):
            kept = {k: t[k][keep] for k in ("start", "end")}
            loss_sum += float(span_loss(start_logits[keep], end_logits[keep], kept, reduction="sum")) / 2
            aligned += int(keep.sum())
    n = len(split)
    return {"f1Score": f1_sum / n, "exact_match": em_sum / n}, (loss_sum / aligned if aligned else float("nan"))


def load_pretrained(path: str, words: tuple[str, ...], embedding: torch.nn.Embedding) -> dict[str, Any]:
    """Copy vectors of a local GloVe-format text file into ``embedding`` for the
    vocabulary's words; returns provenance (sha256 of the file, coverage)."""
    file = Path(path)
    if not file.is_file():
        raise DawnpipeError(f"model_args.pretrained_embeddings: {file}: no such file (a local GloVe-format text file)")
    dim = embedding.weight.shape[1]
    wanted = {w: i for i, w in enumerate(words) if i >= 2}
    found: set[int] = set()
    sha = hashlib.sha256()
    weight = embedding.weight.detach()
    with open(file, "rb") as f:
        for number, raw in enumerate(f, start=1):
            sha.update(raw)
            parts = raw.decode("utf-8", errors="replace").rstrip().split(" ")
            if number == 1 and len(parts) == 2:  # word2vec text header "count dim"
                continue
            word = parts[0].lower()
            if word not in wanted or wanted[word] in found:
                continue
            if len(parts) != dim + 1:
                raise DawnpipeError(f"{file}: line {number}: {len(parts) - 1} numbers, but embedding_dim is {dim}")
            try:
                weight[wanted[word]] = torch.tensor([float(x) for x in parts[1:]])
            except ValueError:
                raise DawnpipeError(f"{file}: line {number}: not a word followed by numbers") from None
            found.add(wanted[word])
    print(f"train: pretrained embeddings {file}: {len(found)} of {len(wanted)} vocabulary words found")
    return {"path": str(file), "sha256": sha.hexdigest(), "words_found": len(found), "vocabulary_words": len(wanted)}


def train(settings: RunSettings, data_dir: Path, out: Outputs, *, threads: int | None = None, resume: bool = True) -> FinishedRun | None:
    """Train one reader with one seed; what it did. SIGTERM or
    SIGUSR1 stops it at the next step (dawnpipe.train.interruptions)."""
    check_recipe(settings.entry)
    if threads:
        torch.set_num_threads(threads)
    gen = seed_everything(settings.seed)
    device = pick_device(settings.entry.device)
    with StopRequest().active() as stop:
        trainer = ReaderTrainer(settings, data_dir, gen=gen, device=device)
        task = trainer.task
        # the exact-match fraction beside F1 in the Parquet log
        logbook = Logbook(
            task.log_columns,
            task.metric_column,
            settings.threshold,
            demo=settings.demo_threshold,
            extra_columns=("exact_match",),
            format_metric=task.format_metric,
        )
        return loop.run(trainer, settings, out, logbook, resume=resume, stop=stop)


class ReaderTrainer(TorchTrainer):
    """A SQuAD reader's epoch and evaluation (the loop's Trainer)."""

    def __init__(self, settings: RunSettings, data_dir: Path, *, gen: torch.Generator, device: torch.device):
        entry, recipe = settings.entry, settings.entry.recipe
        self.settings, self.recipe, self.task = settings, recipe, get_task(entry.task)
        self.reader, net_args = reader_settings(entry)
        vocab = load_vocab(data_dir)
        n_words = kept_size(vocab["word_counts"], self.reader["vocab_size"], self.reader["min_word_count"])
        n_chars = kept_size(vocab["char_counts"], self.reader["char_vocab_size"], 1)
        self.sizes = (n_words, n_chars)
        self.train_split = load_squad(data_dir, "train", settings.train_limit)
        self.dev_split = load_squad(data_dir, "dev", settings.test_limit)
        answer_tokens = np.asarray(self.train_split.arrays["answer_tokens"][: len(self.train_split)])
        self.trainable = np.nonzero(answer_tokens[:, 0] >= 0)[0]  # questions whose first answer aligns to tokens
        if self.trainable.size == 0:
            raise DawnpipeError(f"{data_dir}: no training question with an answer aligned to tokens")
        self.lengths = np.array([self.train_split.context_length(int(i)) for i in self.trainable])

        model = build_reader(entry.model, n_words, n_chars, **net_args).to(device)
        self.pretrained = None
        if self.reader["pretrained_embeddings"]:
            self.pretrained = load_pretrained(self.reader["pretrained_embeddings"], tuple(vocab["words"][:n_words]), model.embedding)
        if self.reader["fix_embeddings"]:
            model.embedding.weight.requires_grad_(False)
        super().__init__(
            model=model,
            optimizer=build_optimizer(torch.nn.ParameterList(p for p in model.parameters() if p.requires_grad), recipe),
            scaler=torch.amp.GradScaler("cuda", enabled=(device.type == "cuda" and recipe.precision == "fp16")),
            gen=gen,
            device=device,
            rank=SINGLE,
            metric_column=self.task.metric_column,
            checkpoint_meta={
                "entry_id": entry.id,
                "task": self.task.name,
                "framework": "pytorch",
                "model": entry.model,
                "model_args": net_args,
                "reader": self.reader,
                "tokenizer": TOKENIZER,
                "vocab_words": list(vocab["words"][:n_words]),
                "vocab_chars": list(vocab["chars"][:n_chars]),
                "precision": recipe.precision,
                "threshold": settings.threshold,
                "metric": self.task.metric_column,
            },
        )
        self.steps = -(-self.trainable.size // recipe.batch_size)

    def describe(self) -> str:
        s, (n_words, n_chars) = self.settings, self.sizes
        return (
            f"train: {s.label} on {self.device} ({torch.get_num_threads()} threads): "
            f"{self.trainable.size} training questions ({len(self.train_split) - self.trainable.size} without an aligned answer skipped), "
            f"{len(self.dev_split)} dev questions, vocabulary {n_words} words / {n_chars} characters, "
            f"{sum(p.numel() for p in self.model.parameters())} parameters, {self.recipe.epochs} epochs of {self.steps} steps, "
            f"threshold {self.task.metric_column} >= {s.threshold:g}" + (" (demo threshold)" if s.demo_threshold else "")
        )

    def epoch(self, epoch: int, steps: loop.Steps) -> loop.EpochResult:
        recipe, device, (n_words, n_chars) = self.recipe, self.device, self.sizes
        self.model.train()
        loss_sum = torch.zeros((), device=device)
        seen, lr = 0, recipe.lr
        for step, rows in enumerate(batch_order(self.lengths, recipe.batch_size, self.gen)):
            if not steps.keep_going(step):
                return loop.EpochResult(float(loss_sum), seen, lr, interrupted=True)
            t = to_device(pad_batch([self.train_split.example(int(i), n_words, n_chars) for i in self.trainable[rows]]), device)
            lr = lr_at(epoch + step / self.steps, recipe.lr, recipe.schedule, recipe.epochs)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            with autocast(device, recipe.precision):
                start_logits, end_logits = forward(self.model, t)
            loss = span_loss(start_logits, end_logits, t)
            self.optimizer.zero_grad()
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            loss_sum += loss.detach().float() * len(rows)
            seen += len(rows)
        return loop.EpochResult(float(loss_sum), seen, lr)

    def evaluate(self) -> tuple[dict[str, float], float]:
        # metrics hold exact_match beside f1Score (the logbook's extra column)
        return evaluate(self.model, self.dev_split, self.sizes, self.device, self.recipe, self.reader["max_answer_tokens"])

    def progress_suffix(self, row: dict[str, Any]) -> str:
        return f"  (exact match {row['exact_match']:.4f}, F1 {self.task.format_metric(row['f1Score'])})"

    def summary(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        from dawnpipe.runinfo import torch_environment

        return {
            "best_exact_match": max(r["exact_match"] for r in rows),
            "train_items": int(self.trainable.size),
            "test_items": len(self.dev_split),
            "vocabulary": {"words": self.sizes[0], "chars": self.sizes[1]},
            "pretrained_embeddings": self.pretrained,
            "environment": torch_environment(self.device),
        }
