"""buildctl: layered, content-keyed, reproducible builds of GPU training images."""

__version__ = "0.1.0"
