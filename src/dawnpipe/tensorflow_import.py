"""TensorFlow (and Keras) loaded the one way that does not crash beside PyTorch.

PyPI's CUDA builds of torch install triton, its GPU kernel compiler. triton
and TensorFlow each carry a copy of LLVM, and loading triton into a process
that has already loaded TensorFlow kills the process with a segmentation
fault; the other order works. torch loads triton lazily (``torch.compile``,
parts of ``torch.export``), so a process that holds both frameworks, such as
a Keras program's export next to a torch one, or the test suite, would crash
at a time nobody chose. Every import of TensorFlow or Keras in dawnpipe goes
through ``tensorflow()``, which loads triton first where it is installed.

``TF_CPP_MIN_LOG_LEVEL`` is set (unless already set) so that TensorFlow's C++
INFO lines stay out of a stage's log; warnings and errors still reach it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType


def load_triton_first() -> None:
    """Load triton now, where it is installed and TensorFlow is not loaded yet."""
    if "triton" in sys.modules or "tensorflow" in sys.modules:
        return
    if importlib.util.find_spec("triton") is not None:
        import triton  # noqa: F401


def tensorflow(log_level: str = "1") -> ModuleType:
    """The ``tensorflow`` module, triton loaded before it (see the module's docstring)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", log_level)
    load_triton_first()
    import tensorflow as tf

    return tf
