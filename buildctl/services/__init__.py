"""Services that own the sequencing: they construct what a command needs and run it."""
