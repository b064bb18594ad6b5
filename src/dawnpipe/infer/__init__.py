"""Inference objective: one-item-at-a-time latency and cost
(docs/rules.md#3-inference-latency, docs/rules.md#4-inference-cost)."""
