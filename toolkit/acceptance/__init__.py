"""Acceptance: nccl-tests parsing, the node-side runner, thresholds and verdicts."""
