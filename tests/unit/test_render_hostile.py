"""Values a shell or a Dockerfile reads specially arrive intact, as values, in every rendered node and in the
launch script (issue 11, defect 3 and the render half of "What to build").

The model objects are built directly (no loader in between): each field that reaches a Dockerfile or a
shell line gets a value holding ``$()``, backticks, quotes, spaces, ``#``, ``\\`` and ``;``; the same stack
with a plain value in each field is rendered beside it. Both outputs are read back with a strict reader
(tests/shellwords.py) and compared: the same instructions, the same operators and expansions, and words
that differ only by the values, which arrive whole and literal. Every value here passes the field's syntax
rule, except where a test says it checks a value that slipped past one.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

import pytest

from buildctl import syntax
from buildctl.builder.pipeline import label_instruction
from buildctl.graph import graph, launch_script, render
from buildctl.graph.graph import Extras
from buildctl.lock.lockfile import LockedBase, LockedComponent, LockedDownload, LockedPip, VariantLock
from buildctl.manifest import pins
from buildctl.manifest.model import Arg, ComponentBuild, Entrypoint, Launcher, Manifest, Profile, SitePath
from tests.shellwords import Token, dockerfile_instructions, dockerfile_words, shell_tokens

PROJECT = Path(__file__).resolve().parents[2]
T = render.load_templates(PROJECT / "images")
STACK = PROJECT / "tests" / "unit" / "graph" / "data" / "graphstack.yaml"
NASTY = "$(touch /pwned) `id` 'single' \"double\" two  spaces #hash \\back $HOME ${ } a;b|c&d"

# field -> (plain value, hostile value); every hostile value passes its field's syntax rule (checked below)
VALUES: dict[str, tuple[str, str]] = {
    "env": ("plainenv", NASTY),
    "build_env": ("plainbuild", NASTY + " build"),
    "arg": ("plainarg", NASTY + " arg"),
    "arg2": ("secondplain", "--x=$(id)"),
    "workdir": ("/opt/plainwd", "/opt/w d/$(id)/`id`/'q'/\"d\"/#h/\\b/$X"),
    "site_default": ("/data/plainsite", "/data/$(id) `x` 'q' #h"),
    "site_doc": ("plain doc", "doc\nRUN id $(id)"),
    "profile": ("plainprofile", "p.1-x_y"),
    "command": ("plaincmd.py", "train $(id).py"),
    "launcher_arg": ("--plainlaunch", "--nproc='8' $(id)"),
    "remove_path": ("/opt/plainrm", "/opt/rm me;$(id)"),
    "cleanup": ("/root/plainclean", "/root/clean `id` #x"),
    "dest": ("/usr/bin/plaindest", "/usr/bin/d $(id)'q'"),
}
RULES = {"env": syntax.text, "build_env": syntax.text, "arg": syntax.text, "arg2": syntax.text,
         "workdir": syntax.abs_path, "site_default": syntax.text, "site_doc": syntax.prose, "profile": syntax.name,
         "command": syntax.text, "launcher_arg": syntax.text, "remove_path": syntax.abs_glob,
         "cleanup": syntax.abs_glob, "dest": syntax.abs_path}


def stack(which: int) -> Manifest:
    """The graph test stack with each field of VALUES set to its plain (0) or hostile (1) value."""
    v = {k: pair[which] for k, pair in VALUES.items()}
    m = pins.load(STACK)
    comps = []
    for c in m.components:
        build: ComponentBuild = dataclasses.replace(c.build, env={**c.build.env, "HOSTILE": v["build_env"]})
        comps.append(dataclasses.replace(c, build=build))
    e = Entrypoint(
        workdir=v["workdir"], command=("python", v["command"]),
        launcher=Launcher(kind="torchrun", args=(v["launcher_arg"],)),
        args=(Arg(flag="--bf16"), Arg(flag="--value", values=(v["arg"],), bare=False),
              Arg(flag="--data", values=("${DATA_PATH}/" + v["arg"],), bare=False), Arg(flag=v["arg2"])),
        paths={"DATA_PATH": SitePath(default=v["site_default"], doc=v["site_doc"])},
        profiles={v["profile"]: Profile(gpus=8, args=(Arg(flag="--value", values=(v["arg"] + " p",), bare=False),))},
        default_profile=v["profile"])
    downloads = tuple(dataclasses.replace(d, dest=v["dest"]) if d.name == "yq" else d for d in m.downloads)
    return dataclasses.replace(
        m, env={**m.env, "HOSTILE": v["env"]}, components=tuple(comps), entrypoint=e, downloads=downloads,
        remove=dataclasses.replace(m.remove, paths=(*m.remove.paths, v["remove_path"])),
        cleanup=(*m.cleanup, v["cleanup"]))


def lock(m: Manifest) -> VariantLock:
    v = m.variant("gpu13")
    h = "sha256:" + "b" * 64
    return VariantLock(
        base=LockedBase(ref=v.image, digest="sha256:" + "a" * 64, platform=v.platform),
        apt={"gdb": "13.1-3", "tmux": "3.4-1", "curl": "8.5.0-2", "libcudnn9-cuda-13": "9.14.0.64-1"},
        build_apt={"kernels": {"libibverbs-dev": "50.0-2"}},
        downloads={"yq": LockedDownload(name="yq", url="https://dl.example/yq", sha256="3" * 64)},
        pip=(LockedPip(name="black", version="24.4.2", hashes=(h,)), LockedPip(name="einops", version="0.8.0",
                                                                            hashes=(h,)),
             LockedPip(name="setuptools", version="69.5.1", in_base=True)),
        build_pip={"engine": (LockedPip(name="mathdx", version="25.1.1", hashes=(h,)),)},
        components={c.name: LockedComponent(name=c.name, repo=c.repo, commit=c.commit.ljust(40, "0"),
                                            tree="e" * 40) for c in m.components})


def rendered(which: int) -> dict[str, str]:
    """name -> text: every node's Dockerfile (with the LABEL the pipeline adds), wheel scripts, the launch script."""
    m = stack(which)
    v = m.variant("gpu13")
    frag = launch_script.render_entrypoint_fragment(m, v)
    g = graph.build(m, lock(m), v, templates=T.digests(), extras=Extras(entrypoint=frag))
    out: dict[str, str] = {}
    for n in g.nodes:
        if n.kind == "base":
            continue
        r = render.render(n, templates=T, parent_ref=f"reg.example/stack/{n.slug}:k")
        labels = dict(getattr(n.spec, "labels", {}) or {})
        out[f"{n.name}.Dockerfile"] = r.dockerfile + label_instruction(labels)
        if r.script is not None:
            out[f"{n.name}.sh"] = r.script
        for cf in r.context:
            out[f"{n.name}.context:{cf.path}"] = cf.text if cf.text is not None else ""
    out["launch"] = launch_script.render_launch_script(m, v)
    return out


def substitute(tokens: list[Token], extra: list[tuple[str, str]]) -> list[Token]:
    """The plain rendering's tokens with each plain value replaced by its hostile value in literal text."""
    out = []
    for t in tokens:
        segs = []
        for kind, text in t.segs:
            if kind == "lit":
                for plain, hostile in [*VALUES.values(), *extra]:
                    text = text.replace(plain, hostile)
            segs.append((kind, text))
        out.append(Token(t.kind, tuple(_merge(segs))))
    return out


def _merge(segs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    merged: list[tuple[str, str]] = []
    for s in segs:
        if merged and merged[-1][0] == s[0] == "lit":
            merged[-1] = ("lit", merged[-1][1] + s[1])
        else:
            merged.append(s)
    return merged


def read(name: str, text: str) -> list[Any]:
    """What a shell or the builder sees in ``text``: instructions with their words, or shell tokens."""
    if name.endswith(".sh") or name == "launch" or ".context:" in name:
        return [("sh", shell_tokens(text))] if text.startswith("#!") or name.endswith(".sh") else [("text", text)]
    out: list[Any] = []
    for instr, args in dockerfile_instructions(text):
        if instr == "RUN":
            out.append((instr, shell_tokens(args)))
        elif instr in ("ENV", "LABEL", "WORKDIR"):
            out.append((instr, dockerfile_words(args)))
        else:
            out.append((instr, args))
    return out


def test_hostile_values_pass_their_syntax_rules() -> None:
    for field, (plain, hostile) in VALUES.items():
        assert RULES[field](plain) is None, field
        assert RULES[field](hostile) is None, (field, RULES[field](hostile))


def test_every_field_reaches_the_output() -> None:
    """Each plain value appears somewhere (so the comparison below covers it)."""
    out = rendered(0)
    text = "\n".join([*out, *out.values()])  # context paths are keys
    missing = [f for f, (plain, _) in VALUES.items() if plain not in text and f != "site_doc"]
    assert not missing


@pytest.fixture(scope="module")
def both() -> tuple[dict[str, str], dict[str, str]]:
    return rendered(0), rendered(1)


def test_defect3_hostile_values_change_no_instruction_and_no_command(
        both: tuple[dict[str, str], dict[str, str]]) -> None:
    """Issue 11 defect 3: rendered with values holding $(), backticks, quotes, spaces, #, \\ and line breaks
    where a field allows them, every node and the launch script hold exactly the instructions, operators and
    expansions of the plain rendering, and each value arrives as one literal piece of its word."""
    plain0, hostile = both
    plain = {_subst_text(k): v for k, v in plain0.items()}  # context paths hold values
    assert plain.keys() == hostile.keys()
    # the launch script's sha256 is a label of the entrypoint: it differs with the values, as it should
    scripts = [(hashlib.sha256(plain["launch"].encode()).hexdigest(), hashlib.sha256(hostile["launch"].encode()).hexdigest())]
    for name in plain:
        a = read(name, plain[name])
        b = read(name, hostile[name])
        assert [x[0] for x in a] == [x[0] for x in b], f"{name}: different instructions"
        for (instr, pa), (_, pb) in zip(a, b, strict=True):
            if isinstance(pa, list):
                assert substitute(pa, scripts) == pb, f"{name}: {instr} reads differently with hostile values"
            elif instr not in ("FROM",):
                assert _subst_text(pa) == pb, f"{name}: {instr}"


def _subst_text(text: str) -> str:
    for p, h in VALUES.values():
        text = text.replace(p, h)
    return text


def test_values_arrive_whole_in_the_words_that_carry_them(both: tuple[dict[str, str], dict[str, str]]) -> None:
    _, hostile = both
    env = [w.literal for instr, words in read("assemble.Dockerfile", hostile["assemble.Dockerfile"])
           if instr == "ENV" for w in words]
    assert f"HOSTILE={NASTY}" in env
    (workdir,) = [words for instr, words in read("entrypoint.Dockerfile", hostile["entrypoint.Dockerfile"])
                  if instr == "WORKDIR"]
    assert [w.literal for w in workdir] == [VALUES["workdir"][1]]
    launch = [t.literal for t in shell_tokens(hostile["launch"])]
    # the default profile replaces --value with its own (arg + " p")
    assert VALUES["arg"][1] + " p" in launch and VALUES["arg2"][1] in launch and VALUES["launcher_arg"][1] in launch
    assert VALUES["workdir"][1] in launch  # cd <workdir>
    wheel = [t.literal for t in shell_tokens(hostile["wheel:engine.sh"])]
    assert f"HOSTILE={VALUES['build_env'][1]}" in wheel
    system = [t.literal for i, toks in read("system.Dockerfile", hostile["system.Dockerfile"]) if i == "RUN"
              for t in toks]
    assert VALUES["remove_path"][1] in system and VALUES["cleanup"][1] in system


def _with_profile(m: Manifest, name: str) -> Manifest:
    assert m.entrypoint is not None
    e = dataclasses.replace(m.entrypoint, profiles={name: m.entrypoint.profiles["plainprofile"]}, default_profile=name)
    return dataclasses.replace(m, entrypoint=e)


def test_a_profile_name_that_slipped_past_its_rule_adds_no_line() -> None:
    """A profile name is a name by its rule. Built directly with shell text, it only shows in comments and
    quoted words of the launch script and in a quoted LABEL value; with a line break it is refused."""
    m = stack(0)
    odd = _with_profile(m, "p $(touch /pwned) `id` 'q' \"d\" #h \\b")
    script = launch_script.render_launch_script(odd, odd.variant("gpu13"))
    plain = launch_script.render_launch_script(m, m.variant("gpu13"))
    assert [t.kind for t in shell_tokens(script)] == [t.kind for t in shell_tokens(plain)]
    # the same expansions in the same places; the name is only ever literal text (the default of
    # ${BUILDCTL_PROFILE:-...} and a case pattern)
    def expansions(text: str) -> list[list[tuple[str, str]]]:
        return [[(k, v if k != "lit" else "") for k, v in t.segs] for t in shell_tokens(text)
                if any(k != "lit" for k, _ in t.segs)]
    assert expansions(script) == expansions(plain)
    name = "p $(touch /pwned) `id` 'q' \"d\" #h \\b"
    assert [v for t in shell_tokens(script) for k, v in t.segs if k == "lit" and v == name] == [name] * 2
    frag = launch_script.render_entrypoint_fragment(odd, odd.variant("gpu13"))
    (label,) = [w.literal for instr, words in read("x.Dockerfile", "FROM x\n" + label_instruction(frag.labels))
                if instr == "LABEL" for w in words if (w.literal or "").startswith("buildctl.entrypoint.profile=")]
    assert label == "buildctl.entrypoint.profile=" + "p $(touch /pwned) `id` 'q' \"d\" #h \\b"
    broken = _with_profile(m, "p\ntouch /pwned")
    with pytest.raises(ValueError, match="line break"):
        launch_script.render_launch_script(broken, broken.variant("gpu13"))  # refused, never written as two lines
