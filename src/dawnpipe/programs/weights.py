"""Weights instead of a model file (program contract 2, docs/programs.md):
the entry's ``program.model``, checked, and the names of the weights files.

A contract 2 program may save its weights, ``torch.save(model.state_dict(),
f"{out}/epoch{N}.pt")`` or Keras ``model.save_weights(f"{out}/epoch{N}.weights.h5")``,
and name in its entry how to build the network and what its own evaluation
does to a stored item:

    program:
      contract: 2
      model:
        factory: "main:Net"          # module importable from the workdir : callable building the network
        kwargs: {}                   # the factory's keyword arguments (plain JSON values)
        preprocessing: {scale: 0.00392156862745098, mean: [0.2860], std: [0.3530], layout: NCHW}

What the schema cannot say is checked here, one line naming the entry file
and the field.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dawnpipe.display import terminal_safe
from dawnpipe.errors import DawnpipeError

FRAMEWORKS = ("torch", "keras")
SUFFIXES = {".pt": "torch", ".weights.h5": "keras"}  # the weights file's name says its framework
MODEL_CONTRACT = 2  # the version of the program contract that has program.model
_WEIGHTS_NAME = re.compile(r"^epoch([0-9]+)(\.pt|\.weights\.h5)$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# ------------------------------------------------------------------ names
def weights_names(epoch: int) -> tuple[str, str]:
    """The names a program's weights of ``epoch`` may have in {out}: torch's, Keras's."""
    return f"epoch{epoch}.pt", f"epoch{epoch}.weights.h5"


def framework_of(path: str | os.PathLike) -> str | None:
    """``torch`` for ``epoch<N>.pt``, ``keras`` for ``epoch<N>.weights.h5``, else None."""
    m = _WEIGHTS_NAME.match(Path(path).name)
    return SUFFIXES[m.group(2)] if m else None


def epoch_of(path: str | os.PathLike) -> int | None:
    """N of ``epoch<N>.pt`` or ``epoch<N>.weights.h5``, else None."""
    m = _WEIGHTS_NAME.match(Path(path).name)
    return int(m.group(1)) if m else None


# ------------------------------------------------------------------ the entry
def _factory_ok(spec: Any) -> bool:
    import keyword

    if not isinstance(spec, str) or spec.count(":") != 1:
        return False
    module, attr = spec.split(":")
    parts = [*module.split("."), *attr.split(".")]
    return all(_IDENTIFIER.match(p) and not keyword.iskeyword(p) for p in parts)


def _not_json(value: Any, path: str) -> tuple[str, str] | None:
    """(field, what) of the first value in ``value`` that JSON cannot carry as it is, or None."""
    if value is None or isinstance(value, bool | int | str):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, "not a finite number")
    if isinstance(value, list):
        for i, item in enumerate(value):
            if (bad := _not_json(item, f"{path}[{i}]")) is not None:
                return bad
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return path, f"a key {key!r} that is not a string"
            if (bad := _not_json(item, f"{path}.{key}")) is not None:
                return bad
        return None
    return path, f"a {type(value).__name__}"


def channels_of(item_shape: Sequence[int]) -> int:
    """Channels of a stored image item: [H, W] has 1, [H, W, C] has C."""
    if len(item_shape) == 2:
        return 1
    if len(item_shape) == 3:
        return int(item_shape[2])
    raise DawnpipeError(f"items of shape {list(item_shape)} are not images ([H, W] or [H, W, C]); a program's weights cannot be exported for them")


def check_entry(program: Mapping[str, Any], source: str, *, item_shape: Sequence[int] | None = None) -> None:
    """``program.model`` as the schema cannot check it (the schema has: types,
    required fields, std > 0, scale > 0, the layouts); one DawnpipeError
    ``SOURCE: field 'program.model.X': reason`` otherwise. Without
    ``item_shape`` (the configuration is read before any data is prepared)
    mean and std must agree with each other; with it, with the items' channels."""
    model = program.get("model")
    if model is None:
        return
    if program.get("contract", 1) != MODEL_CONTRACT:
        raise DawnpipeError(
            f"{source}: field 'program.model': a program hands over weights under contract {MODEL_CONTRACT} (program.contract: {MODEL_CONTRACT}); "
            f"this entry follows contract {program.get('contract', 1)}, where it writes ONNX or a SavedModel itself"
        )
    factory = model.get("factory")
    if not _factory_ok(factory):
        shown = repr(factory) if isinstance(factory, str) else type(factory).__name__
        raise DawnpipeError(
            f"{source}: field 'program.model.factory': expected \"module:callable\" (a module importable from the workdir, "
            f"dotted, and the callable in it that builds the network, e.g. main:Net), got {terminal_safe(shown)}"
        )
    if (bad := _not_json(model.get("kwargs", {}), "program.model.kwargs")) is not None:
        field, what = bad
        raise DawnpipeError(f"{source}: field '{field}': {terminal_safe(what)}; the factory's arguments are plain JSON values")
    prep = model.get("preprocessing", {})
    mean, std = prep.get("mean", [0.0]), prep.get("std", [1.0])
    if len(mean) > 1 and len(std) > 1 and len(mean) != len(std):
        raise DawnpipeError(
            f"{source}: field 'program.model.preprocessing.std': {len(std)} values, but mean has {len(mean)}; "
            "each is one value (every channel) or one per channel"
        )
    if item_shape is not None:
        channels = channels_of(item_shape)
        for name, values in (("mean", mean), ("std", std)):
            if len(values) not in (1, channels):
                raise DawnpipeError(
                    f"{source}: field 'program.model.preprocessing.{name}': {len(values)} values, but the task's items "
                    f"{list(item_shape)} have {channels} channel{'s' if channels != 1 else ''}; give one value (every channel) or {channels}"
                )
