"""PyTorch checkpoints in and out of files, for training and inference alike.

A checkpoint holds tensors and plain values only and is read with
``torch.load(weights_only=True)``: nothing in a file is executed, wherever
it came from (``dvc pull``, a colleague, ``bench/latency.py CHECKPOINT``). A
file that would need pickle (an object of some class) is refused, naming it.
torch is imported when a checkpoint is read or written, not with this module.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import atomic_path


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    import torch

    with atomic_path(path) as tmp:
        torch.save(payload, tmp)


def load_checkpoint(path: str | Path, map_location: Any = "cpu") -> dict[str, Any]:
    """The mapping a checkpoint holds; a missing file is FileNotFoundError
    (the CLI names it), anything else wrong one DawnpipeError naming the file."""
    import torch

    if not Path(path).is_file():
        raise FileNotFoundError(2, "No such file", str(path))
    try:
        doc = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        text = str(e)
        detail = " ".join(text[text.find("WeightsUnpickler error:") :].split()[2:])[:160] if "WeightsUnpickler error:" in text else text[:160]
        if "Unsupported global" in text:  # a class or function: only full pickle could build it
            what = text.split("GLOBAL ", 1)[1].split()[0] if "GLOBAL " in text else "an object"
            raise DawnpipeError(
                f"{path}: needs pickle to load (it holds {what}, not only tensors and plain values), and dawnpipe runs no code from a file: refused"
            ) from None
        raise DawnpipeError(f"{path}: not a readable PyTorch checkpoint ({detail or type(e).__name__})") from None
    except (RuntimeError, EOFError, OSError, ValueError) as e:
        raise DawnpipeError(f"{path}: not a readable PyTorch checkpoint ({str(e).strip()[:200]})") from None
    if not isinstance(doc, dict):
        raise DawnpipeError(f"{path}: a checkpoint holds a mapping, not a {type(doc).__name__}")
    return doc
