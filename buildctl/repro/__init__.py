"""Reproducibility: input audit, building twice, comparing node by node."""
