"""Megatron-LM's arguments read from its source: flags, rules, lint."""
