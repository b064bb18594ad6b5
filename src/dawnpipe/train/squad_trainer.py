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
checkpointing run with the clock stopped. On CUDA the clock is read after
``torch.cuda.synchronize()`` (``TrainingClock``).

Reader options in the entry's ``model_args`` besides the network's own
(``dawnpipe.models.squad_reader``): ``vocab_size`` / ``min_word_count`` (words
kept from the training vocabulary), ``char_vocab_size``, ``max_answer_tokens``
(decoding), ``pretrained_embeddings`` (path of a *local* GloVe-format text
file, ``word v1 ... vD`` per line, to initialise the word embeddings) and
``fix_embeddings`` (keep them frozen).
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from dawnpipe.data.squad import SquadSplit, load_squad, load_vocab
from dawnpipe.entries import config_hash
from dawnpipe.errors import DawnpipeError
from dawnpipe.models.squad_reader import best_spans, build_reader
from dawnpipe.squad.evaluate import score_answer
from dawnpipe.squad.text import TOKENIZER, kept_size, pad_batch
from dawnpipe.tasks import get_task
from dawnpipe.telemetry import mark_training_clock
from dawnpipe.train import EntryError
from dawnpipe.train.interruptions import EpochGuard, StopRequest
from dawnpipe.train.logbook import Logbook
from dawnpipe.train.outputs import Outputs, publish_checkpoint
from dawnpipe.train.schedule import lr_at
from dawnpipe.train.torch_trainer import (
    TrainingClock,
    autocast,
    build_optimizer,
    pick_device,
    restore_state,
    save_checkpoint,
    seed_everything,
    threshold_checkpoint,
    training_state,
)

READER_ARGS = {
    "vocab_size": None,
    "min_word_count": 1,
    "char_vocab_size": None,
    "max_answer_tokens": 15,
    "pretrained_embeddings": None,
    "fix_embeddings": False,
}
BUCKET_BATCHES = 20  # batches drawn together and sorted by context length (less padding, still random)


class SquadLogbook(Logbook):
    """The shared logbook, plus the exact-match fraction in the Parquet log."""

    def frame(self) -> pd.DataFrame:
        frame = super().frame()
        frame.insert(2, "exact_match", [r["exact_match"] for r in self.rows])
        return frame


def reader_settings(entry: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(reader options, network constructor arguments) from the entry's model_args."""
    args = dict(entry["model_args"])
    reader = {k: args.pop(k, default) for k, default in READER_ARGS.items()}
    return reader, args


def check_entry(entry: dict[str, Any]) -> None:
    """What can be checked before any data is read (train.cli calls it): the
    recipe, the reader built on the meta device (which allocates nothing; the
    vocabulary sizes are placeholders until the data is read) and the
    pretrained embeddings file."""
    check_recipe(entry)
    reader, net_args = reader_settings(entry)
    with torch.device("meta"):
        try:
            build_reader(entry["model"], 100, 50, **net_args)
        except DawnpipeError as e:  # an unknown model, a bad model_args key
            raise EntryError(str(e)) from None
    if reader["pretrained_embeddings"] and not Path(reader["pretrained_embeddings"]).is_file():
        raise EntryError(f"model_args.pretrained_embeddings: {reader['pretrained_embeddings']}: no such file")


def check_recipe(entry: dict[str, Any]) -> None:
    """Refuse what this trainer does not do rather than silently ignoring it."""
    hp = entry["hyperparameters"]
    if entry["framework"] != "pytorch":
        raise EntryError(f"framework {entry['framework']}: the SQuAD reader is implemented in PyTorch only")
    image_only = [
        k
        for k, on in (
            ("augment.crop_padding", hp["augment"]["crop_padding"]),
            ("augment.flip", hp["augment"]["flip"]),
            ("tta_flip", hp["tta_flip"]),
            ("channels_last", hp["channels_last"]),
            ("label_smoothing", hp["label_smoothing"]),
        )
        if on
    ]
    if image_only:
        raise EntryError(f"hyperparameters {', '.join(image_only)} apply to images, not to a SQuAD reader; remove them")
    dist = entry["distributed"]
    if dist["nodes"] * dist["processes_per_node"] != 1:
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
def evaluate(model, split: SquadSplit, vocab_sizes: tuple[int, int], device, hp, max_answer_tokens: int) -> tuple[dict[str, float], float]:
    """Official SQuAD v1.1 exact match and F1 (fractions) of the predicted answer
    texts, and the mean span loss over the questions with an aligned answer."""
    model.eval()
    lengths = np.array([split.context_length(i) for i in range(len(split))])
    order = np.argsort(lengths, kind="stable")
    em_sum = f1_sum = loss_sum = 0.0
    aligned = 0
    for start in range(0, len(order), hp["eval_batch_size"]):
        idx = order[start : start + hp["eval_batch_size"]]
        examples = [split.example(int(i), *vocab_sizes) for i in idx]
        t = to_device(pad_batch(examples), device)
        with autocast(device, hp["precision"]):
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


def train(settings: dict[str, Any], data_dir: Path, out: Outputs, *, threads: int | None = None, resume: bool = True) -> dict[str, Any]:
    """Train one reader with one seed; the summary for run.json. SIGTERM or
    SIGUSR1 stops it at the next step (dawnpipe.train.interruptions)."""
    with StopRequest().active() as stop:
        return _train(settings, data_dir, out, threads=threads, resume=resume, stop=stop)


def _train(settings: dict[str, Any], data_dir: Path, out: Outputs, *, threads: int | None, resume: bool, stop: StopRequest) -> dict[str, Any]:
    entry, hp = settings["entry"], settings["entry"]["hyperparameters"]
    task = get_task(entry["task"])
    check_recipe(entry)
    reader, net_args = reader_settings(entry)
    if threads:
        torch.set_num_threads(threads)
    gen = seed_everything(settings["seed"])
    device = pick_device(entry["device"])
    settings_hash = config_hash(settings)

    vocab = load_vocab(data_dir)
    n_words = kept_size(vocab["word_counts"], reader["vocab_size"], reader["min_word_count"])
    n_chars = kept_size(vocab["char_counts"], reader["char_vocab_size"], 1)
    sizes = (n_words, n_chars)
    train_split = load_squad(data_dir, "train", settings["train_limit"])
    dev_split = load_squad(data_dir, "dev", settings["test_limit"])
    answer_tokens = np.asarray(train_split.arrays["answer_tokens"][: len(train_split)])
    trainable = np.nonzero(answer_tokens[:, 0] >= 0)[0]  # questions whose first answer aligns to tokens
    if trainable.size == 0:
        raise DawnpipeError(f"{data_dir}: no training question with an answer aligned to tokens")
    lengths = np.array([train_split.context_length(int(i)) for i in trainable])

    model = build_reader(entry["model"], n_words, n_chars, **net_args).to(device)
    pretrained = None
    if reader["pretrained_embeddings"]:
        pretrained = load_pretrained(reader["pretrained_embeddings"], tuple(vocab["words"][:n_words]), model.embedding)
    if reader["fix_embeddings"]:
        model.embedding.weight.requires_grad_(False)
    optimizer = build_optimizer(torch.nn.ParameterList(p for p in model.parameters() if p.requires_grad), hp)
    scaler = torch.amp.GradScaler("cuda", enabled=(device.type == "cuda" and hp["precision"] == "fp16"))
    logbook = SquadLogbook(task.log_columns, task.metric_column, settings["threshold"], demo=settings["demo_threshold"])
    clock = TrainingClock(device)
    guard = EpochGuard(stop, out.work_dir, settings_hash, resume=resume)
    wall_offset, start_epoch, resumed_from = 0.0, 0, None

    last_path = out.work_dir / "last.pt"
    work_threshold = out.work_dir / "threshold.pt"
    if resume and last_path.exists():
        restored = restore_state(last_path, settings_hash, device, model=model, optimizer=optimizer, scaler=scaler, gen=gen, logbook=logbook, clock=clock)
        if restored is not None:
            wall_offset, start_epoch = restored
            resumed_from = start_epoch
    # spent, and paid for: counted in the training clock (and the wall clock, which never runs behind it)
    pending = guard.lost_before(start_epoch + 1)
    clock.elapsed += pending
    wall_offset += pending

    batch = hp["batch_size"]
    steps = -(-trainable.size // batch)
    checkpoint_meta = {
        "entry_id": entry["id"],
        "task": task.name,
        "framework": "pytorch",
        "model": entry["model"],
        "model_args": net_args,
        "reader": reader,
        "tokenizer": TOKENIZER,
        "vocab_words": list(vocab["words"][:n_words]),
        "vocab_chars": list(vocab["chars"][:n_chars]),
        "precision": hp["precision"],
        "threshold": settings["threshold"],
        "metric": task.metric_column,
    }
    print(
        f"train: {entry['id']} seed {settings['seed']} on {device} ({torch.get_num_threads()} threads): "
        f"{trainable.size} training questions ({len(train_split) - trainable.size} without an aligned answer skipped), "
        f"{len(dev_split)} dev questions, vocabulary {n_words} words / {n_chars} characters, "
        f"{sum(p.numel() for p in model.parameters())} parameters, {hp['epochs']} epochs of {steps} steps, "
        f"threshold {task.metric_column} >= {settings['threshold']:g}" + (" (demo threshold)" if settings["demo_threshold"] else "")
    )

    wall_start = time.perf_counter() - wall_offset
    mark_training_clock(wall_start)  # places the log's wall_hours on the telemetry samples
    stopped_early = False
    for epoch in range(start_epoch, hp["epochs"]):
        if logbook.reached_row is not None and settings["stop_at_threshold"]:  # resumed after reaching it
            stopped_early = True
            break
        guard.stop_before(epoch + 1, stop.requested)
        model.train()
        epoch_clock_before = clock.elapsed
        guard.begin(epoch + 1, clock.elapsed)
        interrupted = False
        with clock.running():
            loss_sum = torch.zeros((), device=device)
            seen = 0
            for step, rows in enumerate(batch_order(lengths, batch, gen)):
                if stop.requested:
                    interrupted = True
                    break
                t = to_device(pad_batch([train_split.example(int(i), n_words, n_chars) for i in trainable[rows]]), device)
                lr = lr_at(epoch + step / steps, hp["lr"], hp["schedule"], hp["epochs"])
                for group in optimizer.param_groups:
                    group["lr"] = lr
                with autocast(device, hp["precision"]):
                    start_logits, end_logits = forward(model, t)
                loss = span_loss(start_logits, end_logits, t)
                optimizer.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                loss_sum += loss.detach().float() * len(rows)
                seen += len(rows)
                guard.heartbeat()
        if interrupted:
            guard.stop_within(epoch + 1, clock.elapsed - epoch_clock_before)
        train_loss = float(loss_sum) / seen
        epoch_seconds = clock.elapsed - epoch_clock_before
        guard.trained(epoch + 1, epoch_seconds)
        if not np.isfinite(train_loss):
            raise DawnpipeError(f"{entry['id']} seed {settings['seed']}: training loss became {train_loss} in epoch {epoch + 1}; the recipe diverged")

        t_eval = time.perf_counter()
        metrics, eval_loss = evaluate(model, dev_split, sizes, device, hp, reader["max_answer_tokens"])
        t_evaluated = time.perf_counter()

        # metrics hold exact_match beside f1Score: SquadLogbook.frame keeps it in the Parquet log
        row = logbook.epoch_row(
            epoch + 1,
            clock.elapsed,
            metrics,
            train_loss=train_loss,
            eval_loss=eval_loss,
            eval_seconds=t_evaluated - t_eval,
            wall_seconds=t_evaluated - wall_start,
            epoch_seconds=epoch_seconds,
            lr=lr,
            items=seen,
            lost_seconds=guard.lost_in(epoch + 1),
        )
        t_ckpt = time.perf_counter()
        first_reached = logbook.add(row)
        if first_reached:
            save_checkpoint(work_threshold, threshold_checkpoint(checkpoint_meta, model, row, task.metric_column, True))
        logbook.write(out.work_dir / "train.tsv", out.work_dir / "train.parquet")
        save_checkpoint(
            last_path,
            training_state(
                settings_hash,
                epoch + 1,
                time.perf_counter() - wall_start,
                hp=hp,
                model=model,
                optimizer=optimizer,
                scaler=scaler,
                gen=gen,
                logbook=logbook,
                clock=clock,
            ),
        )
        guard.saved(epoch + 1)
        row["checkpoint_seconds"] = time.perf_counter() - t_ckpt
        print(
            logbook.progress_line(row, hp["epochs"], first_reached) + f"  (exact match {row['exact_match']:.4f}, F1 {task.format_metric(row['f1Score'])})",
            flush=True,
        )
        if logbook.stops_early(first_reached, epoch + 1, hp["epochs"], settings["stop_at_threshold"]):
            stopped_early = True
            break

    if logbook.reached_row is None:
        save_checkpoint(work_threshold, threshold_checkpoint(checkpoint_meta, model, logbook.rows[-1], task.metric_column, False))
        print(logbook.not_converged_message(task.format_metric))
    logbook.write(out.tsv, out.parquet)
    publish_checkpoint(work_threshold, out.checkpoint)
    from dawnpipe.runinfo import torch_environment

    return {
        **logbook.summary(clock_seconds=clock.elapsed, wall_seconds=time.perf_counter() - wall_start, stopped_early=stopped_early, resumed_from=resumed_from),
        **guard.summary(),
        "best_exact_match": max(r["exact_match"] for r in logbook.rows),
        "train_items": int(trainable.size),
        "test_items": len(dev_split),
        "vocabulary": {"words": n_words, "chars": n_chars},
        "pretrained_embeddings": pretrained,
        "environment": torch_environment(device),
    }
