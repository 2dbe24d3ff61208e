"""Sources: git mirrors, pin resolution, prepared trees; package indexes and plain downloads."""
