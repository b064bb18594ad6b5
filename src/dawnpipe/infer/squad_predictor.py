"""SQuAD inference latency: every dev question answered on its own.

    python -m dawnpipe infer --checkpoint results/runs/drqa/seed0/model.pt --run-json .../run.json \\
        --data data/prepared/squad --prices config/prices.yaml --out .../latency.json \\
        --items-parquet .../latency.parquet        # infer.cli hands SQuAD runs to this module

One item is one question with its paragraph, as text; the timed work is all a
question-answering service does for it: tokenising the paragraph and the
question (``dawnpipe.squad.text``, the same code prepare used), looking the
tokens up in the checkpoint's vocabulary, the reader's forward pass, choosing
the best span and cutting the answer text out of the paragraph. The first
``--warmup`` questions are answered once untimed. Quality is recomputed from
these very answers with the official SQuAD v1.1 metric (F1 as a 0..1 fraction
in ``accuracy``; exact match beside it); the per-question Parquet keeps id,
answer text, F1, exact match and latency, so ``dawnpipe squad-eval`` can check
the answers independently.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch

from dawnpipe.data.squad import load_squad
from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import write_json, write_parquet
from dawnpipe.infer.latency import latency_stats
from dawnpipe.models.squad_reader import best_spans, build_reader
from dawnpipe.prices import load_prices, price_per_hour
from dawnpipe.progress import progress
from dawnpipe.schemas.results import LatencyResult, validate
from dawnpipe.squad.evaluate import score_answer
from dawnpipe.squad.text import TOKENIZER, Vocabulary, encode, pad_batch
from dawnpipe.tasks import get_task
from dawnpipe.tta import inference_cost_per_10k


def reader_predictor(ckpt: dict[str, Any], device: torch.device) -> Callable[[str, str], str]:
    """A function (question, paragraph) -> answer text."""
    if ckpt.get("tokenizer") != TOKENIZER:
        raise DawnpipeError(f"checkpoint tokenised with {ckpt.get('tokenizer')!r}, this dawnpipe uses {TOKENIZER!r}")
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
        return context[spans[first, 0]:spans[last, 1]]

    return predict


def run(args, run_info: dict[str, Any]) -> int:
    torch.set_num_threads(args.threads)
    task = get_task(run_info["task"])
    split = load_squad(args.data, "dev", args.limit)
    device = torch.device("cuda" if run_info["environment"].get("device", "cpu").startswith("cuda") and torch.cuda.is_available() else "cpu")
    predict = reader_predictor(torch.load(args.checkpoint, map_location="cpu", weights_only=False), device)
    items = [(q["question"], split.contexts[q["context"]]) for q in split.questions]
    warmup = min(args.warmup, len(items))
    for question, context in items[:warmup]:
        predict(question, context)
    seconds = np.empty(len(items))
    answers: list[str] = []
    clock = time.perf_counter
    for i in progress(range(len(items)), desc=f"infer {run_info['entry']} s{run_info['seed']}", unit="question"):
        question, context = items[i]
        start = clock()
        answers.append(predict(question, context))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds[i] = clock() - start
    scores = np.array([score_answer(a, q["answers"]) for a, q in zip(answers, split.questions)])
    exact_match, f1 = (float(x) for x in scores.mean(axis=0))
    usd_per_hour = price_per_hour(load_prices(args.prices), run_info["hardware"])
    stats = latency_stats(seconds)
    record = {
        "entry": run_info["entry"], "seed": int(run_info["seed"]), "task": task.name, "model": run_info["model"],
        "framework": run_info["framework"], "hardware": run_info["hardware"], "backend": "eager",
        "device": str(device), "threads": torch.get_num_threads(), "items": len(items),
        "official_items": task.inference_items, "warmup_items": warmup,
        "item": "one question with its paragraph, text in, answer text out (tokenisation included)",
        "accuracy": f1, "exact_match": exact_match, "metric": task.metric_column, "threshold": float(run_info["threshold"]),
        "demo_threshold": bool(run_info["demo_threshold"]), "meets_threshold": f1 >= run_info["threshold"],
        **stats, "usd_per_hour": usd_per_hour,
        "cost_per_10k_usd": inference_cost_per_10k(stats["latency_mean_ms"], usd_per_hour),
    }
    validate(LatencyResult, pd.DataFrame([record]), f"latency of {args.checkpoint}")
    write_parquet(args.items_parquet, pd.DataFrame({
        "item": np.arange(len(items)), "id": [q["id"] for q in split.questions], "latency_ms": seconds * 1000.0,
        "answer": answers, "f1": scores[:, 1], "exact_match": scores[:, 0]}))
    write_json(args.out, record)
    print(f"infer: {record['entry']} seed {record['seed']}: mean {stats['latency_mean_ms']:.4f} ms, p50 {stats['latency_p50_ms']:.4f}, "
          f"p99 {stats['latency_p99_ms']:.4f} over {len(items)} questions ({record['threads']} threads); "
          f"F1 {task.format_metric(f1)}, exact match {exact_match:.4f}"
          + ("" if record["meets_threshold"] else f" < threshold {task.format_metric(run_info['threshold'])}: excluded from the latency ranking"))
    return 0
