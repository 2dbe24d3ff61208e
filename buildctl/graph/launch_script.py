"""The launch script baked into the final layer (``/usr/local/bin/buildctl-launch``), and its Dockerfile fragment.

Every launch of the variant (``entrypoint.launches``) is in the script; see ``buildctl.graph.entrypoint``
for how the arguments are laid over each other. Pure: text out, nothing touches a file or a process.

The script is the image's ENTRYPOINT. It
- holds every profile of its variant; ``$BUILDCTL_PROFILE`` picks one at run time, and the default is
  chosen at build time (``default_profile``, or ``buildctl build --profile``);
- starts the ranks the profile needs: ``torchrun --nproc_per_node G --nnodes N ...`` (G = gpus / nodes),
  with ``$NODE_RANK``/``$MASTER_ADDR``/``$MASTER_PORT`` from the environment (required for more than
  one node) and ``$BUILDCTL_LAUNCHER_ARGS`` appended so that a user overrides any torchrun option; or,
  for ``srun``, it is one rank of ``srun --nodes N --ntasks-per-node G`` (printed by --help), maps
  Slurm's task variables to RANK/WORLD_SIZE/LOCAL_RANK and refuses a step of another size;
- refuses a profile marked ``upstream_defect`` (it is kept to document the example as shipped);
- leaves the runtime environment to the image (``ENV`` lines elsewhere);
- takes site-specific paths (data, cache, checkpoints, tensorboard, tokenizer) from environment
  variables with defaults (``entrypoint.paths``; arguments refer to them as ``${NAME}``);
- holds every manifest argument as one shell word each (``shlex.quote``), so values such as
  ``([0]*3+[1]*58)`` or ``Et|(tt|)*30L`` reach Megatron exactly as the manifest wrote them;
- appends the user's own arguments (``"$@"``; argparse lets a later flag win);
- prints the exact command instead of running it for ``--print-command`` (and, with a short help,
  for ``--help``), so ``docker run IMAGE --help`` works on a machine without GPUs.

Nothing machine-specific goes in: the script names the manifest by its path relative to the project
(``pins/<stack>.yaml``), so that the entrypoint node's key is the same in every checkout.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field

from buildctl import quoting
from buildctl.errors import ManifestError
from buildctl.graph.entrypoint import (
    CONTEXT_NAME,
    LAUNCHER_ARGS_ENV,
    PATH_REF,
    PROFILE_ENV,
    SCRIPT_MODE,
    SCRIPT_PATH,
    _wrapper_words,
    command_words,
    default_launch,
    entrypoint_of,
    launches,
)
from buildctl.manifest.model import Arg, Entrypoint, Manifest, Variant

# ------------------------------------------------------------------------------------------ script



def manifest_name(manifest: Manifest) -> str:
    """The manifest as the script names it: ``pins/<file>``, never the checkout's absolute path."""
    return "pins/" + (posixpath.basename(manifest.path.replace("\\", "/")) or f"{manifest.stack}.yaml")


def _word(text: str, paths: Mapping[str, object], where: Arg | None, entrypoint: Entrypoint) -> str:
    """One shell word for ``text``: literal pieces quoted, ``${NAME}`` of a site path expanded."""
    pieces: list[str] = []
    pos = 0
    for m in PATH_REF.finditer(text):
        name = m.group(1)
        if name not in paths:
            at = where.at if where is not None else entrypoint.at
            known = ", ".join(sorted(paths)) or "none"
            match = difflib.get_close_matches(name, list(paths), n=1)
            raise ManifestError(at, f"{text!r} refers to ${{{name}}}, which entrypoint.paths does not declare",
                                fix=(f"did you mean ${{{match[0]}}}? " if match else "")
                                + f"declared paths: {known}")
        if m.start() > pos:
            pieces.append(quoting.sh(text[pos:m.start()]))
        pieces.append(f'"${{{name}}}"')
        pos = m.end()
    if pos < len(text) or not pieces:
        pieces.append(quoting.sh(text[pos:]))
    return "".join(pieces)


def _comment(text: str) -> str:
    """Text for a one-line comment: newlines would end the comment and start a command."""
    return quoting.comment(text)


def _say(text: str) -> str:
    """A shell line that prints ``text`` (any characters) and a newline."""
    return f"printf '%s\\n' {quoting.sh(text)}"


# Mirrors Python's shlex.quote, so that --print-command prints what shlex.join would.
_QUOTE_FN = r"""_buildctl_quote() {
  local s=$1
  if [[ -z $s ]]; then
    printf "''"
  elif [[ $s == *[!A-Za-z0-9@%+=:,./_-]* ]]; then
    printf "'%s'" "${s//\'/\'\"\'\"\'}"
  else
    printf '%s' "$s"
  fi
}

_buildctl_print_command() {
  local first=1 word
  for word in "$@"; do
    if (( first )); then first=0; else printf ' '; fi
    _buildctl_quote "$word"
  done
  printf '\n'
}

_buildctl_die() {
  printf 'buildctl-launch: %s\n' "$@" >&2
  exit 2
}"""


def render_launch_script(manifest: Manifest, variant: Variant, profile: str | None = None) -> str:
    """The bash launch script for one variant; ``profile`` is its default (None: the manifest's)."""
    e = entrypoint_of(manifest)
    choices = launches(manifest, variant)
    default = default_launch(manifest, variant, profile)
    kind = e.launcher.kind
    env_names = sorted(manifest.env_for(variant))

    def word(text: str, where: Arg | None = None) -> str:
        return _word(text, e.paths, where, e)

    lines = [
        "#!/usr/bin/env bash",
        _comment(f"# Launch script for stack {manifest.stack}, variant {variant.name}; default profile {default}."),
        _comment(f"# Generated by buildctl from {manifest_name(manifest)}: change the manifest, not this file."),
        "# The runtime environment comes from the image (ENV); site paths from the variables below;",
        _comment(f"# ${PROFILE_ENV} picks the profile (one of: {' '.join(choices)})."),
        "#",
        f"#   {CONTEXT_NAME} [ARGS...]                  run the training command; ARGS are appended",
        f"#   {CONTEXT_NAME} --print-command [ARGS...]  print the command it would run, and exit",
        f"#   {CONTEXT_NAME} --help                     print a short help and the command, and exit",
        "set -euo pipefail",
        "",
        _QUOTE_FN,
        "",
    ]
    if e.paths:
        lines.append("# Site-specific paths: set them (docker run -e NAME=...) to point at your storage.")
        for name, p in e.paths.items():
            doc = f"  # {_comment(p.doc)}" if p.doc else ""
            lines.append(f"{quoting.env_name(name)}=${{{name}:-{quoting.sh(p.default)}}}{doc}")
        lines.append("")

    lines.append(f"{PROFILE_ENV}=${{{PROFILE_ENV}:-{quoting.sh(default)}}}")
    lines.append(f'case "${PROFILE_ENV}" in')
    for name, launch in choices.items():
        lines.append(f"  {quoting.sh(name)})")
        lines.append(f"    gpus={launch.gpus or ''} nodes={launch.nodes}")
        lines.append(f"    about={quoting.sh(_comment(launch.description))}")
        lines.append(f"    defect={quoting.sh(_comment(launch.defect))}")
        lines.append("    args=(")
        for a in launch.args:
            lines.append("      " + " ".join(word(w, a) for w in a.argv()))
        lines.append("    )")
        lines.append("    ;;")
    lines.append("  *)")
    lines.append(f'    _buildctl_die "unknown profile {PROFILE_ENV}=${{{PROFILE_ENV}}}" '
                 f"{quoting.sh('profiles: ' + ' '.join(choices))}")
    lines.append("    ;;")
    lines.append("esac")
    lines.append("gpus_per_node=$(( ${gpus:-0} / nodes ))")
    lines.append("")

    program = " ".join(word(w) for w in (*_wrapper_words(manifest), *command_words(manifest)))
    if kind == "torchrun":
        fixed = " ".join(word(w) for w in e.launcher.args)
        lines.extend([
            "# torchrun starts gpus_per_node ranks on each of the profile's nodes; options in",
            f"# ${LAUNCHER_ARGS_ENV} come last, and torchrun lets a later option win.",
            f'read -r -a launcher_args <<<"${{{LAUNCHER_ARGS_ENV}-}}"',
            "launcher=(torchrun --nproc_per_node \"$gpus_per_node\" --nnodes \"$nodes\""
            " --node_rank \"${NODE_RANK:-0}\" --master_addr \"${MASTER_ADDR:-localhost}\""
            f" --master_port \"${{MASTER_PORT:-{e.launcher.master_port}}}\""
            + (f" {fixed}" if fixed else "") + ' "${launcher_args[@]}")',
            "cmd=(",
            f'  "${{launcher[@]}}" {program} "${{args[@]}}"',
            ")",
        ])
    else:
        lines.extend(["cmd=(", f'  {program} "${{args[@]}}"', ")"])
    lines.append("")

    usage = [
        f"usage: {CONTEXT_NAME} [ARGS...]                  run the command below with ARGS appended",
        f"       {CONTEXT_NAME} --print-command [ARGS...]  print that command and exit",
        f"working directory: {e.workdir}",
    ]
    lines.append("_buildctl_help() {")
    lines.append(f"  printf '%s\\n' \"{CONTEXT_NAME}: {manifest.stack} / {variant.name} / profile "
                 f"${{{PROFILE_ENV}}} (${{gpus:-?}} GPUs on $nodes node(s))\"")
    lines.append('  [[ -z $about ]] || printf \'  %s\\n\' "$about"')
    lines.append('  [[ -z $defect ]] || printf \'  cannot run (upstream defect): %s\\n\' "$defect"')
    lines.append("  printf '\\n'")
    lines.extend("  " + _say(u) for u in usage)
    lines.append(f"  printf '\\nprofiles (set {PROFILE_ENV}; default {default}):\\n'")
    for name, launch in choices.items():
        gpus = f"{launch.gpus} GPUs on {launch.nodes} node(s)" if launch.gpus else "GPUs not declared"
        mark = " [upstream defect: does not run]" if launch.defect else ""
        lines.append("  " + _say(f"  {name}: {gpus}{mark}" + (f" - {_comment(launch.description)}"
                                                               if launch.description else "")))
    lines.append("  printf '\\nlauncher:\\n'")
    if kind == "torchrun":
        lines.extend("  " + _say(t) for t in (
            "  torchrun, once per node: gpus / nodes ranks each; on more than one node set NODE_RANK",
            "  (0 .. nodes-1) and MASTER_ADDR (node 0's address) on each; MASTER_PORT defaults to "
            f"{e.launcher.master_port}.",
            f"  {LAUNCHER_ARGS_ENV}='--opt value ...': more torchrun options (a later option wins)."))
        lines.append(f'  printf \'  %s=%s\\n\' {LAUNCHER_ARGS_ENV} "${{{LAUNCHER_ARGS_ENV}-}}"')
    elif kind == "srun":
        lines.extend("  " + _say(t) for t in (
            "  one rank per task: start it on the host with (one container per task)",
        ))
        lines.append(f"  printf '    srun --nodes %s --ntasks-per-node %s [...] {CONTEXT_NAME}\\n' "
                     '"$nodes" "$gpus_per_node"')
        lines.append("  " + _say("  (RANK, WORLD_SIZE, LOCAL_RANK come from SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID;"
                                 " set MASTER_ADDR to the first node and MASTER_PORT)"))
    else:
        lines.append("  " + _say("  none: this script is one process; the site starts as many as the profile needs"))
    lines.append("  printf '\\nsite paths (environment variable: current value):\\n'")
    lines.extend(f'  printf \'  %s=%s\\n\' {quoting.env_name(name)} "${name}"' for name in e.paths)
    if env_names:
        lines.append("  printf '\\nruntime environment (set by the image):\\n'")
        lines.append("  local name")
        lines.append(f"  for name in {' '.join(quoting.env_name(n) for n in env_names)}; do")
        lines.append("    printf '  %s=%s\\n' \"$name\" \"${!name-(unset)}\"")
        lines.append("  done")
    lines.append("  printf '\\ncommand:\\n'")
    lines.append('  _buildctl_print_command "${cmd[@]}"')
    lines.append("}")
    lines.append("")
    lines.extend([
        'case "${1-}" in',
        "  --help|-h)",
        "    _buildctl_help",
        "    exit 0",
        "    ;;",
        "  --print-command)",
        "    shift",
        '    _buildctl_print_command "${cmd[@]}" "$@"',
        "    exit 0",
        "    ;;",
        "esac",
        "",
        f'[[ -z $defect ]] || _buildctl_die "profile ${PROFILE_ENV} cannot run: $defect" '
        f"{quoting.sh('choose another profile with ' + PROFILE_ENV + '=NAME (see --help)')}",
    ])
    if kind == "torchrun":
        lines.extend([
            'if (( nodes > 1 )) && [[ -z ${NODE_RANK-} || -z ${MASTER_ADDR-} ]]; then',
            f'  _buildctl_die "profile ${PROFILE_ENV} runs on $nodes nodes: start this script on each of them with" '
            "'NODE_RANK=0..nodes-1 and MASTER_ADDR=<the address of node 0>'",
            "fi",
        ])
    elif kind == "srun":
        lines.extend([
            "if [[ -n ${SLURM_PROCID-} ]]; then",
            '  [[ ${SLURM_NTASKS-} == "$gpus" ]] || _buildctl_die '
            '"profile $BUILDCTL_PROFILE needs $gpus ranks (srun --nodes $nodes --ntasks-per-node $gpus_per_node);'
            ' this Slurm step has ${SLURM_NTASKS-?}"',
            '  export RANK=${RANK:-$SLURM_PROCID} WORLD_SIZE=${WORLD_SIZE:-$SLURM_NTASKS}'
            ' LOCAL_RANK=${LOCAL_RANK:-${SLURM_LOCALID:-0}}',
            "elif [[ -z ${RANK-} ]]; then",
            '  _buildctl_die "profile $BUILDCTL_PROFILE is one rank of $gpus: start it with'
            ' srun --nodes $nodes --ntasks-per-node $gpus_per_node (see --help)," '
            "'or set RANK, WORLD_SIZE, LOCAL_RANK and MASTER_ADDR yourself'",
            "fi",
            '[[ ${WORLD_SIZE-} == "$gpus" ]] || _buildctl_die "profile $BUILDCTL_PROFILE needs WORLD_SIZE=$gpus,'
            ' got ${WORLD_SIZE-(unset)}"',
            '(( gpus <= 1 )) || [[ -n ${MASTER_ADDR-} ]] || _buildctl_die "set MASTER_ADDR to the address of the'
            ' first node (rank 0) for the $gpus ranks"',
            f"export MASTER_ADDR=${{MASTER_ADDR-}} MASTER_PORT=${{MASTER_PORT:-{e.launcher.master_port}}}",
        ])
    lines.extend([
        f"cd {word(e.workdir)}",
        'exec "${cmd[@]}" "$@"',
        "",
    ])
    return "\n".join(lines)


# -------------------------------------------------------------------------------- Dockerfile fragment


@dataclass(frozen=True, kw_only=True)
class EntrypointFragment:
    """What the entrypoint node needs: the script as a build-context file and the image settings.

    The classic builder's COPY keeps the context file's mode, so the context file must be written
    with ``script_mode`` (no ``COPY --chmod`` without BuildKit).
    """

    script_path: str
    context_name: str
    script: str
    script_mode: int
    workdir: str
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def script_sha256(self) -> str:
        return hashlib.sha256(self.script.encode()).hexdigest()

    def dockerfile_lines(self) -> tuple[str, ...]:
        """Dockerfile instructions that bake the script (after a FROM the caller writes)."""
        out = [f"COPY {self.context_name} {self.script_path}", f"WORKDIR {quoting.dockerfile_word(self.workdir)}"]
        out.extend(f"LABEL {quoting.dockerfile(k)}={quoting.dockerfile(v)}" for k, v in sorted(self.labels.items()))
        out.append(f"ENTRYPOINT {json.dumps(list(self.entrypoint))}")
        out.append(f"CMD {json.dumps(list(self.cmd))}")
        return tuple(out)


def render_entrypoint_fragment(manifest: Manifest, variant: Variant, profile: str | None = None) -> EntrypointFragment:
    """The launch script plus ENTRYPOINT/CMD: ``docker run IMAGE`` launches, ``docker run IMAGE --help`` helps."""
    e = entrypoint_of(manifest)
    default = default_launch(manifest, variant, profile)
    script = render_launch_script(manifest, variant, profile)
    labels = {"buildctl.entrypoint.script": SCRIPT_PATH,
              "buildctl.entrypoint.sha256": hashlib.sha256(script.encode()).hexdigest(),
              "buildctl.entrypoint.profile": default}
    return EntrypointFragment(
        script_path=SCRIPT_PATH,
        context_name=CONTEXT_NAME,
        script=script,
        script_mode=SCRIPT_MODE,
        workdir=e.workdir,
        # exec form, no shell in between: `docker run IMAGE --help` hands --help to the script, and
        # `docker run IMAGE --lr 1e-4` appends to the command. CMD is empty so that a bare run launches.
        entrypoint=(SCRIPT_PATH,),
        cmd=(),
        labels=labels,
    )
