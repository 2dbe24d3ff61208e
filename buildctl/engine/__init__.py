"""The Docker engine: the only package that imports docker."""
