"""SQuAD inference: backend ``eager`` for question items, every dev question
answered on its own.

    python -m dawnpipe infer --checkpoint results/runs/drqa/seed0/model.pt --run-json .../run.json \\
        --data data/prepared/squad --prices config/prices.yaml --out .../latency/eager.json \\
        --items-parquet .../latency/eager.parquet

One item is one question with its paragraph, as text; the timed work is all a
question-answering service does for it: tokenising the paragraph and the
question (``dawnpipe.squad.text``, the same code prepare used), looking the
tokens up in the checkpoint's vocabulary, the reader's forward pass, choosing
the best span and cutting the answer text out of the paragraph. Timing, warm-up
and scoring are the infer command's (``dawnpipe.infer.timing``,
``dawnpipe.infer.items``: the official SQuAD v1.1 F1 as a 0..1 fraction in
``accuracy``, exact match beside it; the per-question Parquet keeps id, answer
text, F1, exact match and latency, so ``dawnpipe squad-eval`` can check the
answers independently).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from dawnpipe.checkpoint import load_checkpoint
from dawnpipe.errors import DawnpipeError
from dawnpipe.infer.predictor import Predictor
from dawnpipe.models.squad_reader import best_spans, build_reader
from dawnpipe.squad.text import TOKENIZER, Vocabulary, encode, pad_batch


def load_reader_checkpoint(path: Path) -> dict[str, Any]:
    """A SQuAD reader's checkpoint, its values checked (schemas/checkpoint.schema.yaml)
    and its weights against the reader they describe (built on the meta
    device): what is wrong is one line naming the file and the field."""
    from dawnpipe.infer.torch_model import check_state_dict
    from dawnpipe.schemas import jsonschema_check

    ckpt = load_checkpoint(path)
    if "state_dict" not in ckpt:
        raise DawnpipeError(f"{path}: not a dawnpipe training checkpoint (missing state_dict)")
    jsonschema_check.check({k: v for k, v in ckpt.items() if k != "state_dict"}, jsonschema_check.package_schema("checkpoint")["question"], str(path))
    if ckpt["tokenizer"] != TOKENIZER:
        raise DawnpipeError(f"{path}: field 'tokenizer': tokenised with {ckpt['tokenizer']!r}, this dawnpipe uses {TOKENIZER!r}")
    try:
        with torch.device("meta"):
            want = build_reader(ckpt["model"], len(ckpt["vocab_words"]), len(ckpt["vocab_chars"]), **ckpt["model_args"]).state_dict()
    except DawnpipeError as e:  # an unknown reader, or model_args it does not take
        raise DawnpipeError(f"{path}: field '{'model' if 'unknown' in str(e) else 'model_args'}': {e}") from None
    except (ValueError, RuntimeError) as e:  # model_args torch refuses (a negative size)
        raise DawnpipeError(f"{path}: field 'model_args': model {ckpt['model']}: {str(e)[:200]}") from None
    check_state_dict(ckpt["state_dict"], want, path, f"a {ckpt['model']} reader with this vocabulary and these model_args")
    return ckpt


def reader_predictor(ckpt: dict[str, Any], device: torch.device) -> tuple[Callable[[str, str], str], Callable[[list], list[str]]]:
    """(a function (question, paragraph) -> answer text, a function [(question, paragraph), ...] -> their answers),
    for a checkpoint load_reader_checkpoint has checked."""
    vocab = Vocabulary(tuple(ckpt["vocab_words"]), tuple(ckpt["vocab_chars"]))
    model = build_reader(ckpt["model"], len(vocab.words), len(vocab.chars), **ckpt["model_args"])
    model.load_state_dict(ckpt["state_dict"])
    model = model.to(device).eval()
    max_tokens = ckpt["reader"]["max_answer_tokens"]
    amp = ckpt["precision"] != "fp32"
    dtype = torch.bfloat16 if ckpt["precision"] == "bf16" else torch.float16

    @torch.inference_mode()
    def predict(question: str, context: str) -> str:
        example = encode(vocab, question, context)
        if len(example["c_words"]) == 0:
            return ""
        t = {k: torch.from_numpy(v).to(device) for k, v in pad_batch([example]).items()}
        with torch.autocast(device.type, dtype=dtype, enabled=amp):
            start, end = model(t["c_words"], t["c_chars"], t["c_feat"], t["c_mask"], t["q_words"], t["q_chars"], t["q_mask"])
        first, last = (int(x) for x in torch.cat(best_spans(start, end, max_tokens)).tolist())  # .tolist() waits for the device
        spans = example["c_spans"]
        return context[spans[first, 0] : spans[last, 1]]

    @torch.inference_mode()
    def predict_batch(items: list) -> list[str]:
        examples = [encode(vocab, question, context) for question, context in items]
        answers = [""] * len(items)
        kept = [i for i, e in enumerate(examples) if len(e["c_words"])]
        if not kept:
            return answers
        t = {k: torch.from_numpy(v).to(device) for k, v in pad_batch([examples[i] for i in kept]).items()}
        with torch.autocast(device.type, dtype=dtype, enabled=amp):
            start, end = model(t["c_words"], t["c_chars"], t["c_feat"], t["c_mask"], t["q_words"], t["q_chars"], t["q_mask"])
        firsts, lasts = (x.tolist() for x in best_spans(start, end, max_tokens))
        for i, first, last in zip(kept, firsts, lasts):
            spans, context = examples[i]["c_spans"], items[i][1]
            answers[i] = context[spans[first, 0] : spans[last, 1]]
        return answers

    return predict, predict_batch


def prepare(checkpoint: Path, *, device: str, threads: int, check_items: list | None = None) -> Predictor:
    """Backend ``eager`` for question items: (question, paragraph) -> answer text.
    Nothing is exported, so there is nothing to check against the checkpoint."""
    from dawnpipe.infer.torch_model import cuda_sync, pick_device, set_threads, stopwatch

    used = set_threads(threads)
    dev = pick_device(device)
    notes: dict[str, Any] = {}
    with stopwatch(notes, "prepare_seconds"):
        ckpt = load_reader_checkpoint(checkpoint)
        answer, answer_batch = reader_predictor(ckpt, dev)
    return Predictor(
        backend="eager",
        predict=lambda item: answer(*item),
        predict_batch=answer_batch,
        device=str(dev),
        threads=used,
        precision=ckpt["precision"],
        framework_version=f"torch {torch.__version__}",
        sync=cuda_sync(dev),
        export_check=None,
        checkpoint={k: ckpt.get(k) for k in ("epoch", "metric", "metric_value", "reached_threshold")},
        notes=notes,
    )
