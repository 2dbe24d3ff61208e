"""What every command handler gets: ``(args, ctx)``, ``ctx`` a Context, and returns an exit status.

The CLI (buildctl/cli.py) makes the Context once per run and calls the handler that the subcommand
registered; the command modules import this module, never the CLI (the front door stands on top).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from buildctl.config import Config
from buildctl.ui import UI


@dataclass(frozen=True, kw_only=True)
class Context:
    project: Path
    config: Config
    ui: UI

    @property
    def pins_dir(self) -> Path:
        return self.project / "pins"


Handler = Callable[[argparse.Namespace, Context], int]
