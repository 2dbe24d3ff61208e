"""The training entrypoint's arguments: variants' overrides, profiles laid over them, the launches a script offers.

The launch script itself and its Dockerfile fragment are rendered by ``buildctl.graph.launch_script``.

Pure: inputs are passed in, the outputs are text and data; nothing here touches a file or a process.

What runs, in layers (each later one wins):

1. ``entrypoint.args`` of the manifest;
2. the variant's override ``variants.<v>.entrypoint`` (``model.EntrypointOverride``): ``drop`` removes
   options, ``args`` replace or add some, ``gpus``/``nodes``/``default_profile`` replace the
   entrypoint's, and ``env`` is laid over the stack's ``env`` in that variant's image
   (``variant_entrypoint``, ``Manifest.env_for``);
3. one profile (``model.Profile``), or ``base`` for none: its args replace or add, and its ``gpus`` and
   ``nodes`` give the launcher's words (``Launch``).
"""
from __future__ import annotations

import dataclasses
import difflib
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass

from buildctl.errors import ManifestError, UsageError
from buildctl.manifest.model import Arg, Entrypoint, Manifest, Profile, Variant
from buildctl.manifest.profiles import (
    BASE_PROFILE,
    arg_key,
    effective_args,
    lay_over,
)

SCRIPT_PATH = "/usr/local/bin/buildctl-launch"
CONTEXT_NAME = "buildctl-launch"
SCRIPT_MODE = 0o755
PROFILE_ENV = "BUILDCTL_PROFILE"
LAUNCHER_ARGS_ENV = "BUILDCTL_LAUNCHER_ARGS"

# ${NAME}: the only form of variable reference an argument may hold (plain $NAME stays literal text).
PATH_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Folders on the PATH of every base we use: a launcher installed there is called by its bare name,
# which keeps the command in the guide's form (`bindpcie python pretrain_gpt.py ...`).
_PATH_DIRS = frozenset({"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"})
_PYTHONS = frozenset({"python", "python3"})


# --------------------------------------------------------------------------------------- arguments


def entrypoint_of(manifest: Manifest) -> Entrypoint:
    if manifest.entrypoint is None:
        raise ManifestError(manifest.at, f"stack {manifest.stack} has no entrypoint",
                            fix="add an entrypoint: section (workdir, command, args)")
    return manifest.entrypoint


def variant_entrypoint(manifest: Manifest, variant: Variant) -> Entrypoint:
    """The manifest's entrypoint with the variant's override applied (``drop``, ``args``, topology)."""
    e = entrypoint_of(manifest)
    o = variant.entrypoint
    if not (o.drop or o.args or o.gpus is not None or o.nodes is not None or o.default_profile is not None):
        return e
    dropped = set(o.drop)
    base = tuple(a for a in e.args if arg_key(a.flag) not in dropped)
    return dataclasses.replace(
        e, args=lay_over(base, o.args),
        gpus=o.gpus if o.gpus is not None else e.gpus,
        nodes=o.nodes if o.nodes is not None else e.nodes,
        default_profile=o.default_profile if o.default_profile is not None else e.default_profile)


def select_profile(entrypoint: Entrypoint, name: str | None) -> tuple[str | None, Profile | None]:
    """The named profile, else the entrypoint's default profile, else none (``base`` names none)."""
    chosen = name if name is not None else entrypoint.default_profile
    if chosen is None or chosen == BASE_PROFILE:
        return None, None
    if chosen not in entrypoint.profiles:
        match = difflib.get_close_matches(chosen, list(entrypoint.profiles), n=1)
        raise UsageError(
            f"the entrypoint has no profile {chosen!r}",
            fix=(f"did you mean {match[0]!r}? " if match else "")
            + f"profiles: {', '.join([*entrypoint.profiles, BASE_PROFILE])}",
        )
    return chosen, entrypoint.profiles[chosen]


def gpu_count(entrypoint: Entrypoint, profile: Profile | None) -> int | None:
    """GPUs the arguments are meant for: the profile's, else the entrypoint's (None: not declared)."""
    return profile.gpus if profile is not None else entrypoint.gpus


def node_count(entrypoint: Entrypoint, profile: Profile | None) -> int:
    """Nodes those GPUs are spread over."""
    return profile.nodes if profile is not None else entrypoint.nodes


@dataclass(frozen=True, kw_only=True)
class Launch:
    """One run-time choice of the launch script: a profile (or ``base``) of one variant."""

    name: str  # profile name, or BASE_PROFILE
    description: str
    defect: str  # upstream_defect: the script refuses it
    gpus: int | None
    nodes: int
    args: tuple[Arg, ...]

    @property
    def gpus_per_node(self) -> int | None:
        return None if self.gpus is None else self.gpus // self.nodes


def launches(manifest: Manifest, variant: Variant) -> dict[str, Launch]:
    """Every run-time choice of the variant's script: each profile, then ``base``."""
    e = variant_entrypoint(manifest, variant)
    out = {name: Launch(name=name, description=p.description, defect=p.upstream_defect, gpus=p.gpus,
                        nodes=p.nodes, args=effective_args(e, p)) for name, p in e.profiles.items()}
    out[BASE_PROFILE] = Launch(name=BASE_PROFILE, description="the entrypoint's arguments, no profile", defect="",
                               gpus=e.gpus, nodes=e.nodes, args=e.args)
    return out


def default_launch(manifest: Manifest, variant: Variant, profile: str | None = None) -> str:
    """The run-time choice used when $BUILDCTL_PROFILE is unset (``profile`` overrides the manifest's)."""
    name, _ = select_profile(variant_entrypoint(manifest, variant), profile)
    return name or BASE_PROFILE


def _wrapper_words(manifest: Manifest) -> tuple[str, ...]:
    e = entrypoint_of(manifest)
    if e.launcher.wrapper is None:
        return ()
    dest = next((d.dest for d in manifest.downloads if d.name == e.launcher.wrapper), None)
    if dest is None:
        raise ManifestError(e.launcher.at, f"launcher.wrapper {e.launcher.wrapper!r} names no download",
                            fix="add the download (with its sha256) and name it here")
    folder, name = posixpath.split(dest)
    return (name if folder in _PATH_DIRS else dest,)


def launcher_words(manifest: Manifest, variant: Variant | None = None, profile: str | None = None,
                   env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The words in front of the entrypoint command, as the script computes them with ``env``.

    torchrun: ``torchrun --nproc_per_node G --nnodes N --node_rank R --master_addr A --master_port P``,
    then ``launcher.args`` and ``$BUILDCTL_LAUNCHER_ARGS``; then the wrapper (bindpcie), if any.
    """
    e = entrypoint_of(manifest)
    v = variant or manifest.default_variant
    env = env or {}
    launch = launches(manifest, v)[env.get(PROFILE_ENV) or default_launch(manifest, v, profile)]
    words: list[str] = []
    if e.launcher.kind == "torchrun":
        words = ["torchrun", "--nproc_per_node", str(launch.gpus_per_node), "--nnodes", str(launch.nodes),
                 "--node_rank", env.get("NODE_RANK") or "0", "--master_addr", env.get("MASTER_ADDR") or "localhost",
                 "--master_port", env.get("MASTER_PORT") or str(e.launcher.master_port),
                 *e.launcher.args, *env.get(LAUNCHER_ARGS_ENV, "").split()]
    return (*words, *_wrapper_words(manifest))


def srun_words(launch: Launch) -> tuple[str, ...]:
    """How a Slurm user starts the ranks of an ``srun`` launch (the script is one of them)."""
    return ("srun", "--nodes", str(launch.nodes), "--ntasks-per-node", str(launch.gpus_per_node))


def command_words(manifest: Manifest) -> tuple[str, ...]:
    """The entrypoint command as the launcher needs it.

    torchrun starts the Python interpreter itself and takes the script as its first argument, so a
    leading ``python``/``python3`` in the manifest's command is dropped for it. bindpcie execs its
    arguments, and pretrain_gpt.py has no shebang, so there the interpreter stays.
    """
    e = entrypoint_of(manifest)
    words = e.command
    if e.launcher.kind == "torchrun" and not e.launcher.wrapper and words and words[0] in _PYTHONS:
        words = words[1:]
    if not words:
        raise ManifestError(e.at, "entrypoint.command names no program", fix="e.g. command: [python, pretrain_gpt.py]")
    return words


def launch_argv(manifest: Manifest, profile: str | None = None, env: Mapping[str, str] | None = None,
                variant: Variant | None = None) -> list[str]:
    """The argv the script execs, with ``${NAME}`` path references resolved from ``env`` or the defaults.

    What the launch script computes at run time, computed here (tests and `--print-command` agree on it).
    ``env`` may hold BUILDCTL_PROFILE, the torchrun variables and the site paths.
    """
    e = entrypoint_of(manifest)
    v = variant or manifest.default_variant
    env = dict(env or {})
    launch = launches(manifest, v)[env.get(PROFILE_ENV) or default_launch(manifest, v, profile)]
    values = {name: p.default for name, p in e.paths.items()}
    values.update({k: val for k, val in env.items() if k in values and val})

    def expand(text: str) -> str:
        return PATH_REF.sub(lambda m: values[m.group(1)], text)

    words = [*launcher_words(manifest, v, profile, env), *command_words(manifest)]
    for a in launch.args:
        words.extend(a.argv())
    return [expand(w) for w in words]
