"""Command modules: each parses, calls one service, prints."""
