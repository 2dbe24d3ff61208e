"""The training entrypoint: the launch script baked into the final layer, and its Dockerfile fragment.

Pure: inputs are passed in, the outputs are text and data; nothing here touches a file or a process.

The script is the image's ENTRYPOINT. It
- leaves the runtime environment to the image (the manifest's ``env`` becomes ``ENV`` lines elsewhere),
- takes site-specific paths (data, cache, checkpoints, tensorboard, tokenizer) from environment
  variables with defaults (``entrypoint.paths``; arguments refer to them as ``${NAME}``),
- holds every manifest argument as one shell word each (``shlex.quote``), so values such as
  ``([0]*3+[1]*58)`` or ``Et|(tt|)*30L`` reach Megatron exactly as the manifest wrote them,
- appends the user's own arguments (``"$@"``; argparse lets a later flag win),
- prints the exact command instead of running it for ``--print-command`` (and, with a short help,
  for ``--help``), so ``docker run IMAGE --help`` works on a machine without GPUs.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from buildctl import quoting
from buildctl.errors import ManifestError, UsageError
from buildctl.model import Arg, Entrypoint, Manifest, Profile, Variant

SCRIPT_PATH = "/usr/local/bin/buildctl-launch"
CONTEXT_NAME = "buildctl-launch"
SCRIPT_MODE = 0o755

# ${NAME}: the only form of variable reference an argument may hold (plain $NAME stays literal text).
PATH_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Folders on the PATH of every base we use: a launcher installed there is called by its bare name,
# which keeps the command in the guide's form (`bindpcie python pretrain_gpt.py ...`).
_PATH_DIRS = frozenset({"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"})
_PYTHONS = frozenset({"python", "python3"})


# --------------------------------------------------------------------------------------- arguments


def arg_key(flag: str) -> str:
    """The option a manifest flag names (``--x=1`` names ``--x``)."""
    return flag.split("=", 1)[0]


def select_profile(entrypoint: Entrypoint, name: str | None) -> tuple[str | None, Profile | None]:
    """The named profile, else the entrypoint's default profile, else none."""
    chosen = name if name is not None else entrypoint.default_profile
    if chosen is None:
        return None, None
    if chosen not in entrypoint.profiles:
        match = difflib.get_close_matches(chosen, list(entrypoint.profiles), n=1)
        raise UsageError(
            f"the entrypoint has no profile {chosen!r}",
            fix=(f"did you mean {match[0]!r}? " if match else "")
            + f"profiles: {', '.join(entrypoint.profiles) or 'none'}",
        )
    return chosen, entrypoint.profiles[chosen]


def effective_args(entrypoint: Entrypoint, profile: Profile | None) -> tuple[Arg, ...]:
    """The entrypoint's arguments with a profile laid over them.

    A profile argument replaces the first base argument that names the same option (keeping its
    position, so the command reads like the guide's) and drops any later repeats of it, so that the
    profile's value is the only one; a profile argument for an option the base lacks is appended.
    """
    if profile is None:
        return entrypoint.args
    overrides = {arg_key(a.flag): a for a in profile.args}
    out: list[Arg] = []
    placed: set[str] = set()
    for a in entrypoint.args:
        key = arg_key(a.flag)
        if key not in overrides:
            out.append(a)
        elif key not in placed:
            out.append(overrides[key])
            placed.add(key)
    out.extend(a for a in profile.args if arg_key(a.flag) not in placed)
    return tuple(out)


def gpu_count(entrypoint: Entrypoint, profile: Profile | None) -> int | None:
    """GPUs the arguments are meant for: the profile's, else the entrypoint's (None: not declared)."""
    return profile.gpus if profile is not None else entrypoint.gpus


def launcher_words(manifest: Manifest) -> tuple[str, ...]:
    """The words in front of the entrypoint command: ``bindpcie`` / ``torchrun ...`` / nothing."""
    e = _entrypoint(manifest)
    kind = e.launcher.kind
    if kind == "none":
        return ()
    if kind == "torchrun":
        return ("torchrun", *e.launcher.args)
    if kind == "bindpcie":
        dest = next((d.dest for d in manifest.downloads if d.name == e.launcher.download), None)
        if dest is None:
            raise ManifestError(e.launcher.at, "launcher bindpcie needs launcher.download naming a download",
                                fix="add the bindpcie download (with its sha256) and name it here")
        folder, name = posixpath.split(dest)
        return (name if folder in _PATH_DIRS else dest, *e.launcher.args)
    raise AssertionError(kind)  # pragma: no cover - Literal checked by the loader


def command_words(manifest: Manifest) -> tuple[str, ...]:
    """The entrypoint command as the launcher needs it.

    torchrun starts the Python interpreter itself and takes the script as its first argument, so a
    leading ``python``/``python3`` in the manifest's command is dropped for it. bindpcie execs its
    arguments, and pretrain_gpt.py has no shebang, so there the interpreter stays.
    """
    e = _entrypoint(manifest)
    words = e.command
    if e.launcher.kind == "torchrun" and words and words[0] in _PYTHONS:
        words = words[1:]
    if not words:
        raise ManifestError(e.at, "entrypoint.command names no program", fix="e.g. command: [python, pretrain_gpt.py]")
    return words


def launch_argv(manifest: Manifest, profile: str | None = None, env: Mapping[str, str] | None = None) -> list[str]:
    """The argv the script execs, with ``${NAME}`` path references resolved from ``env`` or the defaults.

    What the launch script computes at run time, computed here (tests and `--print-command` agree on it).
    """
    e = _entrypoint(manifest)
    _, prof = select_profile(e, profile)
    values = {name: p.default for name, p in e.paths.items()}
    values.update({k: v for k, v in (env or {}).items() if k in values and v})

    def expand(text: str) -> str:
        return PATH_REF.sub(lambda m: values[m.group(1)], text)

    words = [*launcher_words(manifest), *command_words(manifest)]
    for a in effective_args(e, prof):
        words.extend(a.argv())
    return [expand(w) for w in words]


# ------------------------------------------------------------------------------------------ script


def _entrypoint(manifest: Manifest) -> Entrypoint:
    if manifest.entrypoint is None:
        raise ManifestError(manifest.at, f"stack {manifest.stack} has no entrypoint",
                            fix="add an entrypoint: section (workdir, command, args)")
    return manifest.entrypoint


def _word(text: str, paths: Mapping[str, object], where: Arg | None, e: Entrypoint) -> str:
    """One shell word for ``text``: literal pieces quoted, ``${NAME}`` of a site path expanded."""
    pieces: list[str] = []
    pos = 0
    for m in PATH_REF.finditer(text):
        name = m.group(1)
        if name not in paths:
            at = where.at if where is not None else e.at
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
}"""


def render_launch_script(manifest: Manifest, variant: Variant, profile: str | None = None) -> str:
    """The bash launch script for one variant and profile (None: the entrypoint's default profile)."""
    e = _entrypoint(manifest)
    profile_name, prof = select_profile(e, profile)
    args = effective_args(e, prof)
    gpus = gpu_count(e, prof)

    def word(text: str, where: Arg | None = None) -> str:
        return _word(text, e.paths, where, e)

    lines = [
        "#!/usr/bin/env bash",
        _comment(f"# Launch script for stack {manifest.stack}, variant {variant.name}, "
                 f"profile {profile_name or '(none)'}."),
        _comment(f"# Generated by buildctl from {manifest.path or '(manifest)'}: change the manifest, not this file."),
        "# The runtime environment comes from the image (ENV); site paths from the variables below.",
        "#",
        f"#   {CONTEXT_NAME} [ARGS...]                  run the training command; ARGS are appended",
        f"#   {CONTEXT_NAME} --print-command [ARGS...]  print the command it would run, and exit",
        f"#   {CONTEXT_NAME} --help                     print a short help and the command, and exit",
        "set -euo pipefail",
        "",
    ]
    if e.paths:
        lines.append("# Site-specific paths: set them (docker run -e NAME=...) to point at your storage.")
        for name, p in e.paths.items():
            doc = f"  # {_comment(p.doc)}" if p.doc else ""
            lines.append(f"{quoting.env_name(name)}=${{{name}:-{quoting.sh(p.default)}}}{doc}")
        lines.append("")

    lines.append("cmd=(")
    lines.append("  " + " ".join(word(w) for w in (*launcher_words(manifest), *command_words(manifest))))
    for a in args:
        lines.append("  " + " ".join(word(w, a) for w in a.argv()))
    lines.append(")")
    lines.append("")
    lines.append(_QUOTE_FN)
    lines.append("")

    help_lines = [
        f"{CONTEXT_NAME}: {manifest.stack} / {variant.name}"
        + (f" / profile {profile_name}" if profile_name else "")
        + (f" ({gpus} GPUs)" if gpus else ""),
        "",
        f"usage: {CONTEXT_NAME} [ARGS...]                  run the command below with ARGS appended",
        f"       {CONTEXT_NAME} --print-command [ARGS...]  print that command and exit",
        f"working directory: {e.workdir}",
    ]
    lines.append("_buildctl_help() {")
    lines.extend(f"  printf '%s\\n' {quoting.sh(h)}" for h in help_lines)
    if e.paths:
        lines.append("  printf '\\nsite paths (environment variable: current value):\\n'")
        lines.extend(f'  printf \'  %s=%s\\n\' {quoting.env_name(name)} "${name}"' for name in e.paths)
    if manifest.env:
        names = " ".join(quoting.env_name(n) for n in sorted(manifest.env))
        lines.append("  printf '\\nruntime environment (set by the image):\\n'")
        lines.append("  local name")
        lines.append(f"  for name in {names}; do")
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
    e = _entrypoint(manifest)
    profile_name, _ = select_profile(e, profile)
    script = render_launch_script(manifest, variant, profile)
    labels = {"buildctl.entrypoint.script": SCRIPT_PATH,
              "buildctl.entrypoint.sha256": hashlib.sha256(script.encode()).hexdigest()}
    if profile_name:
        labels["buildctl.entrypoint.profile"] = profile_name
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

