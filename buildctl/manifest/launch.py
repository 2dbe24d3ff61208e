"""The launch part of a manifest: the entrypoint's arguments, launcher, site paths and profiles."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from buildctl.errors import Location
from buildctl.manifest.located import doc as _doc
from buildctl.manifest.located import loc

# ------------------------------------------------------------------------------------------ entrypoint


@dataclass(frozen=True, kw_only=True)
class Arg:
    """One launch argument: a flag alone, a flag with one value, or a flag with several values."""

    flag: str
    values: tuple[str, ...] = ()
    bare: bool = True  # a flag with no value (store_true style)
    at: Location = loc()

    def argv(self) -> list[str]:
        return [self.flag, *self.values]


@dataclass(frozen=True, kw_only=True)
class SitePath:
    """A site-specific path the launch script takes from the environment, with a default."""

    default: str = field(metadata=_doc("the path used when the variable is unset"))
    doc: str = field(default="", metadata=_doc("what the path is, for --help"))
    at: Location = loc()


@dataclass(frozen=True, kw_only=True)
class Launcher:
    """How the launch script starts the ranks a profile needs (``buildctl.graph.entrypoint`` renders it).

    - ``torchrun``: the script runs once per node and execs ``torchrun --nproc_per_node G --nnodes N
      --node_rank $NODE_RANK --master_addr $MASTER_ADDR --master_port $MASTER_PORT``, G and N from the
      profile; ``args`` follow, then the words of ``$BUILDCTL_LAUNCHER_ARGS`` (torchrun's argparse lets
      a later option win, so a user overrides any of them).
    - ``srun``: the script is one rank, started once per task by ``srun --nodes N --ntasks-per-node G``
      on the host (one container per task, as pyxis/enroot do); --help prints those words, and the
      script refuses a Slurm step whose task count differs from the profile's.
    - ``none``: the script is one rank, started by whatever the site uses.

    ``wrapper`` names a download (bindpcie) that wraps each rank's command: it execs its arguments.
    """

    kind: Literal["torchrun", "srun", "none"] = field(default="none", metadata=_doc("how ranks start"))
    wrapper: str | None = field(default=None, metadata=_doc("download whose file wraps each rank (bindpcie)"))
    args: tuple[str, ...] = field(default=(), metadata=_doc("torchrun: extra options, after the profile's"))
    master_port: int = field(default=29500, metadata=_doc("torchrun: default of $MASTER_PORT"))
    at: Location = loc()


@dataclass(frozen=True, kw_only=True)
class Profile:
    """A named launch configuration: arguments laid over the entrypoint's, and the GPUs they run on.

    A profile starts from the entrypoint's arguments, or with ``extends`` from another profile's (a
    scaled-down proxy of a full profile, say); ``drop`` removes options from that start, then ``args``
    are laid over it. A derived profile states why each option it sets or drops differs (``reasons``),
    so that a proxy says how it departs from the run it stands for.

    ``gpus`` is the world size; ``nodes`` the node count (``gpus_per_node`` = gpus / nodes), from which
    the launcher's words follow. ``upstream_defect`` marks a profile kept as an upstream example ships
    it although it cannot run: the launch script refuses it and lint-args errors on it are expected.
    """

    description: str = field(default="", metadata=_doc("what the profile runs, for --help"))
    gpus: int = field(metadata=_doc("GPUs the profile runs on (nodes x GPUs per node)"))
    nodes: int = field(default=1, metadata=_doc("nodes the GPUs are spread over (gpus must divide by it)"))
    extends: str | None = field(default=None, metadata=_doc(
        "the profile this one derives from ('base': the entrypoint's arguments); needs a reason per change"))
    drop: tuple[str, ...] = field(default=(), metadata=_doc("options removed from what the profile starts from"))
    args: tuple[Arg, ...] = field(default=(), metadata=_doc("arguments replaced or added by this profile"))
    reasons: Mapping[str, str] = field(default_factory=dict, metadata=_doc(
        "option -> why this profile sets or drops it (one for every change of a derived profile)"))
    upstream_defect: str = field(default="", metadata=_doc("why this profile, kept as upstream ships it, cannot run"))
    at: Location = loc()

    @property
    def gpus_per_node(self) -> int:
        return self.gpus // self.nodes


@dataclass(frozen=True, kw_only=True)
class Entrypoint:
    """The training entrypoint: the launch script baked into the final image (``buildctl.graph.entrypoint``).

    The arguments run with ``args``, then the variant's ``entrypoint`` override (``EntrypointOverride``),
    then the chosen profile laid over them. Every profile (and ``base``: no profile) is in the script;
    ``$BUILDCTL_PROFILE`` picks one at run time, ``default_profile`` (or ``buildctl build --profile``)
    is the one used when it is unset.
    """

    workdir: str = field(metadata=_doc("the image's working folder (WORKDIR)"))
    command: tuple[str, ...] = field(metadata=_doc("e.g. [python, pretrain_gpt.py]"))
    launcher: Launcher = field(default_factory=Launcher)
    args: tuple[Arg, ...] = ()
    paths: Mapping[str, SitePath] = field(default_factory=dict, metadata=_doc("NAME -> default; use ${NAME} in args"))
    profiles: Mapping[str, Profile] = field(default_factory=dict)
    default_profile: str | None = field(default=None, metadata=_doc("used when BUILDCTL_PROFILE is unset"))
    gpus: int | None = field(default=None, metadata=_doc("GPUs the base arguments are meant for"))
    nodes: int = field(default=1, metadata=_doc("nodes the base arguments' GPUs are spread over"))
    megatron: str | None = field(default=None, metadata=_doc("component holding Megatron-LM (for lint-args)"))
    at: Location = loc()


@dataclass(frozen=True, kw_only=True)
class EntrypointOverride:
    """What a variant changes in the entrypoint (``variants.<v>.entrypoint``).

    ``env`` is laid over the stack's ``env`` in this variant's image; ``drop`` removes base arguments
    by option name; ``args`` replace (same option) or add base arguments, as a profile's do; ``gpus``,
    ``nodes`` and ``default_profile`` replace the entrypoint's. Profiles are laid over the result.
    """

    env: Mapping[str, str] = field(default_factory=dict, metadata=_doc("runtime environment laid over env"))
    drop: tuple[str, ...] = field(default=(), metadata=_doc("options removed from the base arguments"))
    args: tuple[Arg, ...] = field(default=(), metadata=_doc("arguments replaced or added for this variant"))
    gpus: int | None = field(default=None, metadata=_doc("replaces entrypoint.gpus"))
    nodes: int | None = field(default=None, metadata=_doc("replaces entrypoint.nodes"))
    default_profile: str | None = field(default=None, metadata=_doc("replaces entrypoint.default_profile"))
    at: Location = loc()
