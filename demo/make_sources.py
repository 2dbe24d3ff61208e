#!/usr/bin/env python3
"""Create the demo stack's git sources as git bundles under demo/sources/.

Two small repositories, written with `git fast-import` from the contents below, with fixed author and
committer identities and fixed dates, so that every commit SHA is the same on every machine and the
committed lock of pins/demo.yaml stays valid:

- fastmath.bundle: a Python package with a small C extension (setuptools; its version is
  fastmath/VERSION.txt plus "+<git rev-parse --short HEAD>", the way Transformer Engine builds its version),
  three commits on main, tag v0.2.0, and PR 7 (refs/pull/7/head, two commits branched from main~1) that
  adds clamp() and applies cleanly on main as cherry-picks.
- demo-trainer.bundle: a pure-source tree (placed in the image like Megatron-LM at /opt/megatron-lm) whose
  train.py parses Megatron-style arguments and prints the command it would launch as JSON; two commits on
  main and PR 3 (refs/pull/3/head, branched from main~1) that adds --recompute-granularity.

Usage: python3 demo/make_sources.py [--out DIR] [--check]
  --check  build into a temporary folder and compare byte for byte with the bundles in --out.
Uses only the standard library and git (the user's and system git configuration are ignored).
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

AUTHOR = "Demo Author <author@demo.buildctl.invalid>"
COMMITTER = "Demo Committer <committer@demo.buildctl.invalid>"
EPOCH = 1736154000  # 2025-01-06T09:00:00Z; commit n is dated EPOCH + n hours
HERE = Path(__file__).resolve().parent

Files = dict[str, tuple[int, str]]  # path -> (mode, text)


@dataclass(frozen=True)
class Commit:
    ref: str
    mark: int
    parent: int | None
    hour: int
    message: str
    files: Files  # the complete tree of the commit


# ------------------------------------------------------------------------------------------ fastmath

FM_PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "fastmath"
description = "A few numeric helpers written in C (the buildctl demo stack's compiled component)"
requires-python = ">=3.9"
dynamic = ["version"]

[tool.setuptools]
packages = ["fastmath"]

[tool.setuptools.package-data]
fastmath = ["VERSION.txt"]
"""

FM_SETUP = '''\
"""Build fastmath: one C extension, fastmath._core."""

import subprocess
from pathlib import Path

from setuptools import Extension, setup

ROOT = Path(__file__).resolve().parent


def version() -> str:
    """VERSION.txt plus "+<short SHA of the tree>", the way Transformer Engine versions its builds.

    Without git (or outside a repository) the version is VERSION.txt alone.
    """
    base = (ROOT / "fastmath" / "VERSION.txt").read_text().strip()
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return base
    sha = out.stdout.strip()
    return f"{base}+{sha}" if sha else base


VERSION = version()

setup(
    version=VERSION,
    ext_modules=[
        Extension(
            "fastmath._core",
            ["fastmath/_core.c"],
            define_macros=[("FASTMATH_VERSION", f'"{VERSION}"')],
        )
    ],
)
'''

FM_INIT = '''\
"""fastmath: a few numeric helpers written in C (the buildctl demo stack's compiled component)."""

from fastmath import _core
from fastmath._core import *  # noqa: F403  (every function of the C module is public)

__version__: str = _core.__version__
'''

FM_README_1 = """\
# fastmath

A few numeric helpers written in C, built into a wheel with setuptools.

Functions:

- add(a, b)

Build: `pip wheel --no-build-isolation --no-deps -w dist .` (needs a C compiler and Python headers).
The version is fastmath/VERSION.txt plus `+<git rev-parse --short HEAD>` when built from a git tree.
"""

FM_C_HEAD = """\
/* fastmath._core: a few numeric helpers in C (the buildctl demo stack's compiled component). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#ifndef FASTMATH_VERSION
#define FASTMATH_VERSION "unknown"
#endif

/* add(a, b): a + b as a float */
static PyObject *
fastmath_add(PyObject *self, PyObject *args)
{
    double a, b;
    if (!PyArg_ParseTuple(args, "dd", &a, &b))
        return NULL;
    return PyFloat_FromDouble(a + b);
}

"""

FM_C_SCALE = """\
/* scale(xs, k): a new list with every element of xs multiplied by k */
static PyObject *
fastmath_scale(PyObject *self, PyObject *args)
{
    PyObject *xs, *seq, *out;
    double k;
    Py_ssize_t n, i;
    if (!PyArg_ParseTuple(args, "Od", &xs, &k))
        return NULL;
    seq = PySequence_Fast(xs, "scale() expects a sequence");
    if (seq == NULL)
        return NULL;
    n = PySequence_Fast_GET_SIZE(seq);
    out = PyList_New(n);
    if (out == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    for (i = 0; i < n; i++) {
        double x = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
        PyObject *v;
        if (PyErr_Occurred() || (v = PyFloat_FromDouble(x * k)) == NULL) {
            Py_DECREF(seq);
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, v);
    }
    Py_DECREF(seq);
    return out;
}

"""

FM_C_DOT = """\
/* dot(xs, ys): the sum of x * y over two sequences of equal length */
static PyObject *
fastmath_dot(PyObject *self, PyObject *args)
{
    PyObject *xs, *ys, *fx, *fy;
    double total = 0.0;
    Py_ssize_t n, i;
    if (!PyArg_ParseTuple(args, "OO", &xs, &ys))
        return NULL;
    fx = PySequence_Fast(xs, "dot() expects sequences");
    if (fx == NULL)
        return NULL;
    fy = PySequence_Fast(ys, "dot() expects sequences");
    if (fy == NULL) {
        Py_DECREF(fx);
        return NULL;
    }
    n = PySequence_Fast_GET_SIZE(fx);
    if (n != PySequence_Fast_GET_SIZE(fy)) {
        PyErr_SetString(PyExc_ValueError, "dot() needs sequences of equal length");
        goto fail;
    }
    for (i = 0; i < n; i++) {
        double x = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(fx, i));
        double y = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(fy, i));
        if (PyErr_Occurred())
            goto fail;
        total += x * y;
    }
    Py_DECREF(fx);
    Py_DECREF(fy);
    return PyFloat_FromDouble(total);
fail:
    Py_DECREF(fx);
    Py_DECREF(fy);
    return NULL;
}

"""

FM_C_CLAMP = """\
/* clamp(x, lo, hi): x limited to [lo, hi] */
static PyObject *
fastmath_clamp(PyObject *self, PyObject *args)
{
    double x, lo, hi;
    if (!PyArg_ParseTuple(args, "ddd", &x, &lo, &hi))
        return NULL;
    if (lo > hi) {
        PyErr_SetString(PyExc_ValueError, "clamp() needs lo <= hi");
        return NULL;
    }
    return PyFloat_FromDouble(x < lo ? lo : (x > hi ? hi : x));
}

"""

FM_C_TAIL = """\
static struct PyModuleDef fastmath_module = {
    PyModuleDef_HEAD_INIT, "_core", "fastmath's C helpers", -1, fastmath_methods,
};

PyMODINIT_FUNC
PyInit__core(void)
{
    PyObject *m = PyModule_Create(&fastmath_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddStringConstant(m, "__version__", FASTMATH_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
"""

M_ADD = '    {"add", fastmath_add, METH_VARARGS, "add(a, b) -> a + b"},\n'
M_SCALE = '    {"scale", fastmath_scale, METH_VARARGS, "scale(xs, k) -> [x * k for x in xs]"},\n'
M_DOT = '    {"dot", fastmath_dot, METH_VARARGS, "dot(xs, ys) -> sum of x * y"},\n'
M_CLAMP = '    {"clamp", fastmath_clamp, METH_VARARGS, "clamp(x, lo, hi) -> x limited to [lo, hi]"},\n'


def fm_core(*, scale: bool, dot: bool, clamp: bool) -> str:
    funcs = FM_C_HEAD + (FM_C_SCALE if scale else "") + (FM_C_DOT if dot else "") + (FM_C_CLAMP if clamp else "")
    table = ("static PyMethodDef fastmath_methods[] = {\n" + M_ADD + (M_SCALE if scale else "")
             + (M_DOT if dot else "") + (M_CLAMP if clamp else "") + "    {NULL, NULL, 0, NULL}\n};\n\n")
    return funcs + table + FM_C_TAIL


def fm_readme(*, scale: bool, dot: bool, clamp: bool) -> str:
    bullets = "- add(a, b)\n" + ("- scale(xs, k)\n" if scale else "") + ("- dot(xs, ys)\n" if dot else "") + (
        "- clamp(x, lo, hi)\n" if clamp else "")
    return FM_README_1.replace("- add(a, b)\n", bullets)


def fm_tree(*, version: str, scale: bool = False, dot: bool = False, clamp: bool = False) -> Files:
    return {
        "pyproject.toml": (0o100644, FM_PYPROJECT),
        "setup.py": (0o100644, FM_SETUP),
        "README.md": (0o100644, fm_readme(scale=scale, dot=dot, clamp=clamp)),
        "fastmath/__init__.py": (0o100644, FM_INIT),
        "fastmath/VERSION.txt": (0o100644, version + "\n"),
        "fastmath/_core.c": (0o100644, fm_core(scale=scale, dot=dot, clamp=clamp)),
    }


def fastmath_commits() -> list[Commit]:
    main, pr = "refs/heads/main", "refs/pull/7/head"
    return [
        Commit(main, 1, None, 0, "fastmath: package skeleton with add()", fm_tree(version="0.1.0")),
        Commit(main, 2, 1, 1, "fastmath: dot() of two sequences", fm_tree(version="0.1.0", dot=True)),
        Commit(main, 3, 2, 2, "fastmath 0.2.0: scale()", fm_tree(version="0.2.0", scale=True, dot=True)),
        # PR 7 branches from main~1 and touches other lines than main's last commit: it cherry-picks cleanly.
        Commit(pr, 4, 2, 3, "fastmath: clamp(x, lo, hi) in C", {
            **fm_tree(version="0.1.0", dot=True),
            "fastmath/_core.c": (0o100644, fm_core(scale=False, dot=True, clamp=True)),
        }),
        Commit(pr, 5, 4, 4, "fastmath: document clamp()", fm_tree(version="0.1.0", dot=True, clamp=True)),
    ]


# -------------------------------------------------------------------------------------- demo-trainer

DT_ENUMS = '''\
"""Closed sets of choices, as Megatron-LM keeps them in megatron/core/transformer/enums.py."""

import enum


class AttnBackend(enum.Enum):
    flash = 1
    fused = 2
    unfused = 3
    local = 4
    auto = 5

    def __str__(self) -> str:
        return self.name
'''

DT_ARGS_HEAD = '''\
"""The demo trainer's command-line arguments.

Laid out like Megatron-LM's megatron/training/arguments.py: one function per group, every flag a literal
group.add_argument('--flag', ...) call, enum choices, a dest= rename, an alias and a BooleanOptionalAction.
"""

import argparse

from demo_trainer.enums import AttnBackend


def attn_backend(name):
    try:
        return AttnBackend[name]
    except KeyError:
        raise argparse.ArgumentTypeError(f"invalid attention backend {name!r}") from None


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="demo-trainer arguments", allow_abbrev=False)
    parser = _add_model_args(parser)
    parser = _add_parallel_args(parser)
    parser = _add_precision_args(parser)
    parser = _add_training_args(parser)
    parser = _add_data_args(parser)
'''

DT_ARGS_CALL_MEMORY = "    parser = _add_memory_args(parser)\n"

DT_ARGS_BODY = '''\
    return parser.parse_args(argv)


def _add_model_args(parser):
    group = parser.add_argument_group(title="model")
    group.add_argument('--layers', type=int, required=True, help='number of transformer layers')
    group.add_argument('--hidden', type=int, required=True, help='hidden size')
    group.add_argument('--heads', type=int, default=8, help='attention heads')
    group.add_argument('--seq-length', type=int, default=512, help='tokens per sample')
    group.add_argument('--attention-backend', type=attn_backend, default=AttnBackend.auto,
                       choices=list(AttnBackend), help='attention implementation')
    return parser


def _add_parallel_args(parser):
    group = parser.add_argument_group(title="parallelism")
    group.add_argument('--gpus', type=int, default=1, help='GPUs to launch on')
    group.add_argument('--tensor-parallel', type=int, default=1, help='tensor-parallel size')
    group.add_argument('--pipeline-parallel', type=int, default=1, help='pipeline-parallel size')
    group.add_argument('--pipeline-layout', type=str, default=None,
                       help='layers per pipeline stage, e.g. "Et|(tt|)*3L"')
    return parser


def _add_precision_args(parser):
    group = parser.add_argument_group(title="precision")
    group.add_argument('--precision', default='bf16', choices=['fp32', 'fp16', 'bf16', 'fp8'],
                       help='training precision')
    group.add_argument('--fp8-format', default=None, choices=['e4m3', 'hybrid'], dest='fp8',
                       help='FP8 format (with --precision fp8)')
    group.add_argument('--fp8-recipe', default='delayed', choices=['tensorwise', 'delayed', 'mxfp8', 'blockwise'],
                       help='FP8 scaling recipe')
    return parser


def _add_training_args(parser):
    group = parser.add_argument_group(title="training")
    group.add_argument('--micro-batch-size', type=int, default=1)
    group.add_argument('--global-batch-size', type=int, default=8)
    group.add_argument('--train-iters', type=int, default=10)
    group.add_argument('--overlap-grad-reduce', action=argparse.BooleanOptionalAction, default=False)
    group.add_argument('--save-interval', '--persistent-save-interval', type=int, default=1000)
    group.add_argument('--seed', type=int, default=1234)
    return parser


def _add_data_args(parser):
    group = parser.add_argument_group(title="data")
    group.add_argument('--data-path', nargs='+', default=None, help='dataset prefixes')
    group.add_argument('--save', type=str, default=None, help='checkpoint folder')
    group.add_argument('--load', type=str, default=None, help='checkpoint to start from')
    return parser
'''

DT_ARGS_MEMORY = '''

def _add_memory_args(parser):
    group = parser.add_argument_group(title="memory")
    group.add_argument('--recompute-granularity', default=None, choices=['full', 'selective'],
                       help='recompute activations in the backward pass')
    return parser
'''

DT_TRAIN_1 = '''\
#!/usr/bin/env python3
"""demo-trainer: parse the training arguments and print the command it would launch, as JSON.

The buildctl demo stack's stand-in for a training entrypoint such as Megatron-LM's pretrain_gpt.py: the
image bakes `python train.py <args>`, and running it shows that the arguments parse with this tree's parser.
"""

import json
import os
import sys

from demo_trainer.arguments import parse_args
from demo_trainer.enums import AttnBackend

# NVTE_FLASH_ATTN / NVTE_FUSED_ATTN / NVTE_UNFUSED_ATTN per backend, as Megatron-LM sets them
ATTENTION_ENV = {
    AttnBackend.flash: ("1", "0", "0"),
    AttnBackend.fused: ("0", "1", "0"),
    AttnBackend.unfused: ("0", "0", "1"),
    AttnBackend.local: ("0", "0", "0"),
    AttnBackend.auto: ("1", "1", "1"),
}


def fail(message):
    print(f"train.py: error: {message}", file=sys.stderr)
    return 2


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    names = ("NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN", "NVTE_UNFUSED_ATTN")
    env = dict(zip(names, ATTENTION_ENV[args.attention_backend]))
    for name, value in env.items():
        if os.environ.get(name, value) != value:
            return fail(f"{name}={os.environ[name]} contradicts --attention-backend {args.attention_backend}")
    if args.gpus % (args.tensor_parallel * args.pipeline_parallel):
        return fail("--gpus must be a multiple of --tensor-parallel x --pipeline-parallel")
'''

DT_TRAIN_CHECKS = '''\
    if args.pipeline_layout is not None and args.pipeline_parallel < 2:
        return fail("--pipeline-layout needs --pipeline-parallel 2 or more")
    if args.fp8 is not None and args.precision != "fp8":
        return fail("--fp8-format needs --precision fp8")
'''

DT_TRAIN_2 = '''\
    command = ["torchrun", f"--nproc-per-node={args.gpus}", "-m", "demo_trainer.loop", *argv]
    parsed = {k: (str(v) if isinstance(v, AttnBackend) else v) for k, v in sorted(vars(args).items())}
    print(json.dumps({"command": command, "env": env, "args": parsed}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''

DT_README = """\
# demo-trainer

A pure-source training entrypoint for the buildctl demo stack, installed as a source tree (the way
Megatron-LM is placed at /opt/megatron-lm). `python train.py --layers 2 --hidden 64 ...` parses its
arguments and prints the command it would launch as JSON, then exits 0; a bad argument exits 2.
"""


def dt_tree(*, checks: bool, memory: bool) -> Files:
    args = DT_ARGS_HEAD + (DT_ARGS_CALL_MEMORY if memory else "") + DT_ARGS_BODY + (DT_ARGS_MEMORY if memory else "")
    return {
        "README.md": (0o100644, DT_README),
        "train.py": (0o100755, DT_TRAIN_1 + (DT_TRAIN_CHECKS if checks else "") + DT_TRAIN_2),
        "demo_trainer/__init__.py": (0o100644, '"""The demo trainer (see train.py)."""\n'),
        "demo_trainer/enums.py": (0o100644, DT_ENUMS),
        "demo_trainer/arguments.py": (0o100644, args),
    }


def trainer_commits() -> list[Commit]:
    main, pr = "refs/heads/main", "refs/pull/3/head"
    return [
        Commit(main, 1, None, 10, "demo-trainer: Megatron-style arguments, print the launch command",
               dt_tree(checks=False, memory=False)),
        Commit(main, 2, 1, 11, "demo-trainer: check --pipeline-layout and --fp8-format",
               dt_tree(checks=True, memory=False)),
        # PR 3 branches from main~1 and changes arguments.py only: it cherry-picks cleanly onto main.
        Commit(pr, 3, 1, 12, "demo-trainer: --recompute-granularity {full,selective}",
               dt_tree(checks=False, memory=True)),
    ]


# ------------------------------------------------------------------------------------------- writing

REPOS = {
    "fastmath": (fastmath_commits, {"refs/tags/v0.2.0": 3}),
    "demo-trainer": (trainer_commits, {}),
}


def fast_import_stream(commits: list[Commit], tags: dict[str, int]) -> bytes:
    out = bytearray()
    for c in commits:
        when = f"{EPOCH + 3600 * c.hour} +0000"
        msg = (c.message + "\n").encode()
        out += f"commit {c.ref}\nmark :{c.mark}\n".encode()
        out += f"author {AUTHOR} {when}\ncommitter {COMMITTER} {when}\n".encode()
        out += f"data {len(msg)}\n".encode() + msg
        if c.parent is not None:
            out += f"from :{c.parent}\n".encode()
        out += b"deleteall\n"
        for path, (mode, text) in sorted(c.files.items()):
            data = text.encode()
            out += f"M {mode:o} inline {path}\ndata {len(data)}\n".encode() + data + b"\n"
        out += b"\n"
    for ref, mark in sorted(tags.items()):
        out += f"reset {ref}\nfrom :{mark}\n\n".encode()
    return bytes(out)


def git(*args: str, cwd: Path | None = None, stdin: bytes | None = None) -> str:
    # Nothing from the user's or system's git configuration may change what gets written.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", LC_ALL="C")
    r = subprocess.run(["git", "-c", "pack.threads=1", "-c", "core.compression=9", *args], cwd=cwd, env=env,
                       input=stdin, capture_output=True, check=False)
    if r.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed: {r.stderr.decode(errors='replace').strip()}")
    return r.stdout.decode()


def make(out: Path) -> dict[str, dict[str, str]]:
    """Write <name>.bundle for each repository into ``out``; return {name: {ref: sha}}."""
    out.mkdir(parents=True, exist_ok=True)
    heads: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="demo-sources-") as tmp:
        for name, (commits, tags) in REPOS.items():
            repo = Path(tmp) / f"{name}.git"
            git("init", "--quiet", "--bare", str(repo))
            git("symbolic-ref", "HEAD", "refs/heads/main", cwd=repo)
            git("fast-import", "--quiet", cwd=repo, stdin=fast_import_stream(commits(), tags))
            git("fsck", "--strict", "--no-dangling", cwd=repo)
            target = out / f"{name}.bundle"
            tmp_target = out / f".{name}.bundle.tmp"
            git("bundle", "create", "--quiet", str(tmp_target), "--all", cwd=repo)
            os.replace(tmp_target, target)
            refs = git("for-each-ref", "--format=%(refname) %(objectname)", cwd=repo)
            heads[name] = dict(line.split(" ") for line in refs.splitlines())
    return heads


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=HERE / "sources", help="folder for the bundles")
    parser.add_argument("--check", action="store_true",
                        help="rebuild in a temporary folder and compare with the bundles in --out")
    args = parser.parse_args(argv)
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            heads = make(Path(tmp))
            differ = [n for n in REPOS if not (args.out / f"{n}.bundle").is_file()
                      or not filecmp.cmp(Path(tmp) / f"{n}.bundle", args.out / f"{n}.bundle", shallow=False)]
        if differ:
            print(f"out of date in {args.out}: {', '.join(differ)} (run demo/make_sources.py)", file=sys.stderr)
            return 1
    else:
        heads = make(args.out)
    print(json.dumps(heads, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
