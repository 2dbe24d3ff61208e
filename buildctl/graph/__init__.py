"""The build graph: node specs, content keys, rendered Dockerfiles, the plan (pure)."""
