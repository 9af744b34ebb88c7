"""Matching layers to the chip's MATMUL by constraint solving (seed 000,
docs/matching.md)."""
