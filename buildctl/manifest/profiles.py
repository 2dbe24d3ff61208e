"""A launch's arguments with profiles laid over them: pure functions of the manifest's launch model, shared by
the loader's checks (manifest/semantic.py) and everything that renders or lints a launch (graph/entrypoint.py,
megatron/lintargs.py)."""

from __future__ import annotations

from buildctl.manifest.launch import Arg, Entrypoint, Profile

BASE_PROFILE = "base"  # the run-time name of "no profile": the entrypoint's (and variant's) own arguments
# Options of torchrun that the profile decides (gpus / nodes) or that come from the environment.
TORCHRUN_OWNED = ("--nproc_per_node", "--nproc-per-node", "--nnodes", "--node_rank", "--node-rank",
                  "--master_addr", "--master-addr", "--master_port", "--master-port")


def arg_key(flag: str) -> str:
    """The option a manifest flag names (``--x=1`` names ``--x``)."""
    return flag.split("=", 1)[0]


def lay_over(base: tuple[Arg, ...], over: tuple[Arg, ...]) -> tuple[Arg, ...]:
    """``over`` laid over ``base``: an argument replaces the first base argument naming the same option
    (keeping its position, so the command reads like the guide's) and drops later repeats of it; an
    argument for an option the base lacks is appended."""
    if not over:
        return base
    overrides = {arg_key(a.flag): a for a in over}
    out: list[Arg] = []
    placed: set[str] = set()
    for a in base:
        key = arg_key(a.flag)
        if key not in overrides:
            out.append(a)
        elif key not in placed:
            out.append(overrides[key])
            placed.add(key)
    out.extend(a for a in over if arg_key(a.flag) not in placed)
    return tuple(out)


def profile_start(entrypoint: Entrypoint, profile: Profile) -> tuple[Arg, ...]:
    """The arguments a profile starts from: the entrypoint's, or those of the profile it ``extends``."""
    parent = profile.extends
    if parent is None or parent == BASE_PROFILE or parent not in entrypoint.profiles:
        return entrypoint.args  # an unknown parent is the loader's error (pins._check_derived)
    return effective_args(entrypoint, entrypoint.profiles[parent])


def effective_args(entrypoint: Entrypoint, profile: Profile | None) -> tuple[Arg, ...]:
    """The entrypoint's arguments with a profile laid over them: what it starts from (``profile_start``),
    less the options it drops, with its arguments laid over the rest (see ``lay_over``)."""
    if profile is None:
        return entrypoint.args
    dropped = set(profile.drop)
    start = tuple(a for a in profile_start(entrypoint, profile) if arg_key(a.flag) not in dropped)
    return lay_over(start, profile.args)
