"""The pin manifest: typed model and the YAML loader that checks every field."""
