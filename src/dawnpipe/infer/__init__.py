"""Inference objective: one-item-at-a-time latency and cost (SPEC.md objectives 3-4)."""
