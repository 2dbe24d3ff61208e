"""Executing a plan: prepare host inputs, build the missing nodes, the smoke gate."""
