"""bench/latency.py's verdict on the speed-up target: the headline ratio is
said to be met by int8 only when no fp32 backend of the same run meets it.
(The script itself was run by hand on the tiny fixtures of infer_fixtures.py;
it needs a trained checkpoint and the 10,000 test images to mean anything.)"""

from __future__ import annotations

import importlib.util

from conftest import ROOT

spec = importlib.util.spec_from_file_location("bench_latency", ROOT / "bench/latency.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

INT8 = {"backend": "onnxruntime-int8", "precision": "int8"}
FP32 = {"backend": "onnxruntime", "precision": "fp32"}


def test_target_met_only_by_int8_says_so_with_the_fp32_ratio():
    note = bench.target_note(3.0, INT8, 5.3, FP32, 1.7)
    assert note == "target 3x over eager: met only by int8 (onnxruntime-int8 5.30x); the best fp32 backend, onnxruntime, reaches 1.70x"


def test_target_met_by_fp32_too_or_not_at_all():
    assert bench.target_note(3.0, INT8, 5.3, FP32, 3.2) == "target 3x over eager: met by onnxruntime-int8 (5.30x) and by fp32 onnxruntime (3.20x)"
    assert bench.target_note(3.0, FP32, 3.2, FP32, 3.2) == "target 3x over eager: met by onnxruntime (3.20x)"
    assert bench.target_note(3.0, INT8, 2.0, FP32, 1.5) == "target 3x over eager: not met (best onnxruntime-int8 2.00x)"
    assert bench.target_note(2.0, INT8, 4.0, None, None).endswith("no fp32 backend kept the accuracy")
