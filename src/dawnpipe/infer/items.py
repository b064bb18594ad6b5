"""What one inference item is, per kind of task, and how answers are scored.

- ``image`` (classification tasks): an item is one stored image, the uint8
  array as kept on disk; the answer is a class id, or for a top-5 task
  (ImageNet) the five most likely ids; quality is top-1 (top-5) accuracy in
  percent. Calibrating backends get a prefix of the training split. Sharded
  sets (ImageNet) stay on disk: indexing one item reads it into memory before
  the timing loop starts the clock.
- ``question`` (SQuAD): an item is one question with its paragraph, as text;
  the answer is the answer text; quality is the official SQuAD v1.1 F1 (a 0..1
  fraction), exact match beside it.

The timing loop never looks inside an item; backends declare the kind they
answer (``dawnpipe.infer.backends``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dawnpipe.errors import DawnpipeError
from dawnpipe.tasks import Task

# Training items handed to backends that calibrate (int8 activation ranges): a
# prefix of the training split, so every run and backend calibrates on the same.
CALIBRATION_ITEMS = 512


@dataclass
class InferenceSet:
    items: Sequence[Any]  # handed to predict one at a time, in order
    truth: Any  # what the answers are scored against
    data: Path
    calibration: Sequence[Any] | None = None  # filled on demand (calibration_items)


@dataclass
class Scored:
    value: float  # the task's inference quality (accuracy_field of the task)
    columns: dict[str, Any]  # per-item columns for the Parquet table
    extra: dict[str, Any] = field(default_factory=dict)  # more fields of the result record


class ImageItems:
    name = "image"
    description = "one stored image (uint8 array) in, its class id out; scaling, normalisation and test-time augmentation included"

    TOPK = {"top1Accuracy": 1, "top5Accuracy": 5}

    def topk(self, task: Task) -> int:
        """How many class ids an answer holds."""
        try:
            return self.TOPK[task.inference_accuracy_field]
        except KeyError:
            raise DawnpipeError(
                f"task {task.name}: inference scores {task.inference_accuracy_field}; image items are scored as {' or '.join(self.TOPK)}"
            ) from None

    def load(self, task: Task, data: Path, limit: int | None) -> InferenceSet:
        from dawnpipe.data.loader import ShardedArray, load_split

        self.topk(task)
        split = load_split(data, "test", limit)
        # in memory (np.array of the memory map): no disk reads while timing;
        # a sharded set stays on disk and reads each item when it is indexed
        images = split.images if isinstance(split.images, ShardedArray) else np.array(split.images)
        return InferenceSet(items=images, truth=np.array(split.labels), data=Path(data))

    def calibration_items(self, inference: InferenceSet) -> np.ndarray:
        from dawnpipe.data.loader import load_split

        return np.array(load_split(inference.data, "train", CALIBRATION_ITEMS).images)

    def score(self, task: Task, answers: list[Any], inference: InferenceSet) -> Scored:
        labels = np.asarray(inference.truth, dtype=np.int64)
        if self.topk(task) == 1:
            answers_ = np.asarray(answers, dtype=np.int64)
            correct = answers_ == labels
            return Scored(100.0 * float(correct.mean()), {"answer": answers_, "label": labels, "correct": correct})
        correct = np.array([int(label) in answer for answer, label in zip(answers, labels)], dtype=bool)
        top1 = np.array([answer[0] for answer in answers], dtype=np.int64)
        columns = {"answer": [list(map(int, a)) for a in answers], "label": labels, "correct": correct}
        return Scored(100.0 * float(correct.mean()), columns, {"top1Accuracy": 100.0 * float((top1 == labels).mean())})


class QuestionItems:
    name = "question"

    def topk(self, task: Task) -> int:
        return 1

    description = "one question with its paragraph (text) in, the answer text out; tokenisation included"

    def load(self, task: Task, data: Path, limit: int | None) -> InferenceSet:
        from dawnpipe.data.squad import load_squad

        split = load_squad(data, "dev", limit)
        items = [(q["question"], split.contexts[q["context"]]) for q in split.questions]
        return InferenceSet(items=items, truth=split.questions, data=Path(data))

    def calibration_items(self, inference: InferenceSet) -> None:
        raise DawnpipeError("no question-answering backend calibrates")

    def score(self, task: Task, answers: list[Any], inference: InferenceSet) -> Scored:
        from dawnpipe.squad.evaluate import score_answer

        scores = np.array([score_answer(a, q["answers"]) for a, q in zip(answers, inference.truth)]).reshape(-1, 2)
        exact_match, f1 = (float(x) for x in scores.mean(axis=0))
        columns = {"id": [q["id"] for q in inference.truth], "answer": list(answers), "f1": scores[:, 1], "exact_match": scores[:, 0]}
        return Scored(f1, columns, {"exact_match": exact_match})


KINDS = {k.name: k for k in (ImageItems(), QuestionItems())}


def item_kind(task: Task) -> ImageItems | QuestionItems:
    """What one inference item of ``task`` is: its data module says (dawnpipe.tasks.kind)."""
    return KINDS[task.data_kind.items]
