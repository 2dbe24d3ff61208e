"""Rendering: exact Dockerfile text per node kind, and the fragment rules."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from buildctl.graph import graph, render, specs
from buildctl.graph.graph import Extras, Graph
from buildctl.graph.render import ContextFile, TemplateError, Templates, WheelFile
from buildctl.manifest import model
from tests.helpers import load_script

IMAGES = Path(__file__).resolve().parents[3] / "images"
T = render.load_templates(IMAGES)
SETTLE = """\
    find / -xdev -newer /tmp/.buildctl-stamp -exec touch -h -d @315532800 {} +; \\
    rm -f /tmp/.buildctl-stamp; \\
    touch -h -d @315532800 /tmp
"""
APT_KEEP = """\
    byproducts='/var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb /var/cache/apt/archives/lock \\
      /var/cache/apt/archives/partial/* /var/log/apt/* /var/log/dpkg.log /var/log/alternatives.log \\
      /var/cache/debconf/*-old /var/cache/ldconfig/aux-cache'; \\
    kept=; for p in $byproducts; do if [ -e "$p" ] || [ -L "$p" ]; then kept="$kept ${p#/}"; fi; done; \\
    tar -C / -cpf /tmp/.buildctl-kept.tar --files-from /dev/null $kept; \\
"""
APT_CLEAN = """\
    rm -rf $byproducts; \\
    tar -C / -xpf /tmp/.buildctl-kept.tar; \\
    rm -f /tmp/.buildctl-kept.tar; \\
"""
HB, HC, HD, HE = ("sha256:" + c * 64 for c in "bcde")


def g(gs: Any, locked: bool = True, **kw: object) -> Graph:
    m = gs.load()
    return graph.build(m, gs.lock_for(m) if locked else None, m.variant("gpu13"), templates=T.digests(),
                       extras=Extras(entrypoint=gs.ENTRY, **kw))  # type: ignore[arg-type]


def r(gs: Any, name: str, locked: bool = True, **kw: object) -> render.Rendered:
    return render.render(g(gs, locked).node(name), templates=T, parent_ref=f"reg/stack/{name}-parent:k", **kw)  # type: ignore[arg-type]


def test_cudnn(gs: Any) -> None:
    out = r(gs, "cudnn")
    assert out.dockerfile == """\
# cudnn: the pinned cuDNN from its apt source, directly on the base (rendered by buildctl/graph/render.py)
FROM reg/stack/cudnn-parent:k
COPY rootfs/ /
RUN set -eu; \\
    touch /tmp/.buildctl-stamp; \\
    export DEBIAN_FRONTEND=noninteractive PYTHONDONTWRITEBYTECODE=1; \\
""" + APT_KEEP + """\
    printf '%s\\n' 'deb [signed-by=/usr/share/keyrings/cuda.gpg] https://repo.example/sbsa /' > /etc/apt/sources.list.d/buildctl-cuda.list; \\
    apt-get update; \\
    apt-get install -y --no-install-recommends libcudnn9-cuda-13=9.14.0.64-1; \\
""" + APT_CLEAN + """\
    rm -rf /root/.cache /tmp/*; \\
""" + SETTLE
    assert out.context == (ContextFile(path="rootfs/usr/share/keyrings/cuda.gpg", download="cuda-keyring"),)
    assert not out.wheelhouse


def test_system(gs: Any) -> None:
    out = r(gs, "system")
    assert out.dockerfile == """\
# system: downloads, removals, apt sources and packages (rendered by buildctl/graph/render.py)
FROM reg/stack/system-parent:k
COPY rootfs/ /
RUN set -eu; \\
    touch /tmp/.buildctl-stamp; \\
    export DEBIAN_FRONTEND=noninteractive PYTHONDONTWRITEBYTECODE=1; \\
    python3 -m pip check --disable-pip-version-check > /usr/local/lib/buildctl-pip-check-base.txt 2>&1 || true; \\
    PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip uninstall -y old-core; \\
    rm -rf /opt/old-tree; \\
""" + APT_KEEP + """\
    apt-get update; \\
    apt-get install -y --no-install-recommends \\
      curl=8.5.0-2 \\
      gdb=13.1-3 \\
      tmux=3.4-1; \\
""" + APT_CLEAN + """\
    rm -rf /root/.cache /tmp/*; \\
""" + SETTLE
    # downloads come from the host, checked, with their mode: never fetched inside a RUN
    assert out.context == (ContextFile(path="rootfs/usr/bin/yq", mode="0755", download="yq"),)
    assert "curl " not in out.dockerfile and "wget" not in out.dockerfile


def test_system_unlocked_renders_patterns_for_review(gs: Any) -> None:
    out = r(gs, "system", locked=False)
    assert """\
    apt-get install -y --no-install-recommends \\
      curl \\
      gdb \\
      tmux=3.4-1; \\
""" in out.dockerfile


def test_python(gs: Any) -> None:
    # installer=False: pip alone, as a hand-written Dockerfile has it (and the RUN's fallback below)
    out = r(gs, "python", installer=False)
    assert out.dockerfile == f"""\
# python: pinned pip packages from the host's wheelhouse, protected base packages checked
# (rendered by buildctl/graph/render.py)
FROM reg/stack/python-parent:k
ARG BUILDCTL_WHEELHOUSE
COPY rootfs/ /
RUN set -eu; \\
    touch /tmp/.buildctl-stamp; \\
    export PYTHONDONTWRITEBYTECODE=1 SOURCE_DATE_EPOCH=315532800; \\
    wheelhouse_host=${{BUILDCTL_WHEELHOUSE#http://}}; wheelhouse_host=${{wheelhouse_host%%/*}}; \\
    python3 /usr/local/lib/buildctl-protect.py snapshot torch 'nvidia-*' > /tmp/buildctl-protected.json; \\
    printf '%s\\n' \\
      'black==24.4.2 --hash={HB}' \\
      'click==8.1.7 --hash={HC}' \\
      'einops==0.8.0 --hash={HD}' \\
      > /tmp/buildctl-requirements.txt; \\
    PIP_BREAK_SYSTEM_PACKAGES=1 PIP_CONSTRAINT= PIP_TRUSTED_HOST="$wheelhouse_host" python3 -m pip install --no-index --find-links "$BUILDCTL_WHEELHOUSE" --only-binary=:all: --no-deps --no-cache-dir --no-compile --require-hashes -r /tmp/buildctl-requirements.txt; \\
    rm -f /tmp/buildctl-requirements.txt; \\
    python3 /usr/local/lib/buildctl-protect.py check /tmp/buildctl-protected.json; \\
    rm -f /tmp/buildctl-protected.json; \\
    rm -rf /root/.cache /tmp/*; \\
""" + SETTLE
    assert out.context == (ContextFile(path="rootfs/usr/local/lib/buildctl-protect.py", text=T.text("protect.py")),)
    # the default: images/install.py first (no pip, no protect snapshot: it declines for any installed name),
    # pip as before when it declines (exit 3); any other failure fails the RUN
    out = r(gs, "python")
    assert out.dockerfile == f"""\
# python: pinned pip packages from the host's wheelhouse, protected base packages checked
# (rendered by buildctl/graph/render.py)
FROM reg/stack/python-parent:k
ARG BUILDCTL_WHEELHOUSE
COPY rootfs/ /
RUN set -eu; \\
    touch /tmp/.buildctl-stamp; \\
    export PYTHONDONTWRITEBYTECODE=1 SOURCE_DATE_EPOCH=315532800; \\
    wheelhouse_host=${{BUILDCTL_WHEELHOUSE#http://}}; wheelhouse_host=${{wheelhouse_host%%/*}}; \\
    if PIP_BREAK_SYSTEM_PACKAGES=1 PIP_CONSTRAINT= PIP_TRUSTED_HOST="$wheelhouse_host" python3 -B /usr/local/lib/buildctl-install.py --epoch 315532800 --installer "${{BUILDCTL_WHEELHOUSE}}tools/installer-0.7.0-py3-none-any.whl#sha256=05d1933f0a5ba7d8d6296bb6d5018e7c94fa473ceb10cf198a92ccea19c27b53" --find-links "$BUILDCTL_WHEELHOUSE" -- \\
        'black==24.4.2 --hash={HB}' \\
        'click==8.1.7 --hash={HC}' \\
        'einops==0.8.0 --hash={HD}' \\
      ; then :; else \\
      rc=$?; [ "$rc" -eq 3 ] || exit "$rc"; \\
      python3 /usr/local/lib/buildctl-protect.py snapshot torch 'nvidia-*' > /tmp/buildctl-protected.json; \\
      printf '%s\\n' \\
        'black==24.4.2 --hash={HB}' \\
        'click==8.1.7 --hash={HC}' \\
        'einops==0.8.0 --hash={HD}' \\
        > /tmp/buildctl-requirements.txt; \\
      PIP_BREAK_SYSTEM_PACKAGES=1 PIP_CONSTRAINT= PIP_TRUSTED_HOST="$wheelhouse_host" python3 -m pip install --no-index --find-links "$BUILDCTL_WHEELHOUSE" --only-binary=:all: --no-deps --no-cache-dir --no-compile --require-hashes -r /tmp/buildctl-requirements.txt; \\
      rm -f /tmp/buildctl-requirements.txt; \\
      python3 /usr/local/lib/buildctl-protect.py check /tmp/buildctl-protected.json; \\
      rm -f /tmp/buildctl-protected.json; \\
    fi; \\
    rm -rf /root/.cache /tmp/*; \\
""" + SETTLE
    assert out.wheelhouse
    assert out.context == (ContextFile(path="rootfs/usr/local/lib/buildctl-protect.py", text=T.text("protect.py")),
                           ContextFile(path="rootfs/usr/local/lib/buildctl-install.py", text=T.text("install.py")))


def test_python_without_cleanup_settles_only_after_pip(gs: Any) -> None:
    # nothing else in the RUN writes: the stamp and the settle scan happen only when install.py declined
    node = g(gs, True).node("python")
    node = replace(node, spec=replace(node.spec, cleanup=()))  # type: ignore[arg-type]
    text = render.render(node, templates=T, parent_ref="p").dockerfile
    run = text.split("RUN ", 1)[1]
    assert run.startswith("set -eu; \\\n    export PYTHONDONTWRITEBYTECODE=1")
    assert "      rc=$?; [ \"$rc\" -eq 3 ] || exit \"$rc\"; \\\n      touch /tmp/.buildctl-stamp; \\\n" in run
    assert run.endswith("""\
    fi; \\
    if [ -e /tmp/.buildctl-stamp ]; then \\
      find / -xdev -newer /tmp/.buildctl-stamp -exec touch -h -d @315532800 {} +; \\
      rm -f /tmp/.buildctl-stamp; \\
      touch -h -d @315532800 /tmp; \\
    fi
""")


def test_python_unhashed_pins_go_to_pip(gs: Any) -> None:
    text = r(gs, "python", locked=False).dockerfile
    assert "buildctl-install.py" not in text and "touch /tmp/.buildctl-stamp" in text


def test_python_policies(gs: Any) -> None:
    m = gs.load()
    m = replace(m, pip=replace(m.pip, constraint=model.PipConstraintPolicy.KEEP),
                protect=replace(m.protect, replace=("torch",)))
    gr = graph.build(m, gs.lock_for(m), m.variant("gpu13"), templates=T.digests(),
                     extras=Extras(entrypoint=gs.ENTRY))
    text = render.render(gr.node("python"), templates=T, parent_ref="p").dockerfile
    assert "      PIP_BREAK_SYSTEM_PACKAGES=1 PIP_TRUSTED_HOST=\"$wheelhouse_host\" python3 -m pip install --no-index" in text  # keep: no PIP_CONSTRAINT=
    assert "    if PIP_BREAK_SYSTEM_PACKAGES=1 PIP_TRUSTED_HOST=\"$wheelhouse_host\" python3 -B /usr/local/lib/buildctl-install.py" in text
    assert "protect.py check /tmp/buildctl-protected.json --replace torch; \\\n" in text
    none = replace(m, protect=replace(m.protect, packages=(), replace=()))
    gr = graph.build(none, gs.lock_for(m), m.variant("gpu13"), templates=T.digests(), extras=Extras(entrypoint=gs.ENTRY))
    out = render.render(gr.node("python"), templates=T, parent_ref="p")
    assert "protect.py" not in out.dockerfile
    assert out.context == (ContextFile(path="rootfs/usr/local/lib/buildctl-install.py", text=T.text("install.py")),)


def test_python_without_lock_has_no_hash_mode(gs: Any) -> None:
    text = r(gs, "python", locked=False).dockerfile
    assert """\
    printf '%s\\n' \\
      black==24.4.2 \\
      einops \\
      setuptools==69.5.1 \\
      > /tmp/buildctl-requirements.txt; \\
    PIP_BREAK_SYSTEM_PACKAGES=1 PIP_CONSTRAINT= PIP_TRUSTED_HOST="$wheelhouse_host" python3 -m pip install --no-index --find-links "$BUILDCTL_WHEELHOUSE" --only-binary=:all: --no-deps --no-cache-dir --no-compile -r /tmp/buildctl-requirements.txt; \\
""" in text


def test_compile_env(gs: Any) -> None:
    out = r(gs, "compile-env:engine")
    assert out.dockerfile == f"""\
# compile-env: what one component's compile needs, on the base (or cuDNN), nothing of the
# runtime layers (rendered by buildctl/graph/render.py)
FROM reg/stack/compile-env:engine-parent:k
ARG BUILDCTL_WHEELHOUSE
COPY rootfs/ /
RUN set -eu; \\
    touch /tmp/.buildctl-stamp; \\
    export DEBIAN_FRONTEND=noninteractive PYTHONDONTWRITEBYTECODE=1 SOURCE_DATE_EPOCH=315532800; \\
    wheelhouse_host=${{BUILDCTL_WHEELHOUSE#http://}}; wheelhouse_host=${{wheelhouse_host%%/*}}; \\
    if PIP_BREAK_SYSTEM_PACKAGES=1 PIP_CONSTRAINT= PIP_TRUSTED_HOST="$wheelhouse_host" python3 -B /usr/local/lib/buildctl-install.py --epoch 315532800 --installer "${{BUILDCTL_WHEELHOUSE}}tools/installer-0.7.0-py3-none-any.whl#sha256=05d1933f0a5ba7d8d6296bb6d5018e7c94fa473ceb10cf198a92ccea19c27b53" --find-links "$BUILDCTL_WHEELHOUSE" -- \\
        'mathdx==25.1.1 --hash={HE}' \\
      ; then :; else \\
      rc=$?; [ "$rc" -eq 3 ] || exit "$rc"; \\
      printf '%s\\n' \\
        'mathdx==25.1.1 --hash={HE}' \\
        > /tmp/buildctl-requirements.txt; \\
      PIP_BREAK_SYSTEM_PACKAGES=1 PIP_CONSTRAINT= PIP_TRUSTED_HOST="$wheelhouse_host" python3 -m pip install --no-index --find-links "$BUILDCTL_WHEELHOUSE" --only-binary=:all: --no-deps --no-cache-dir --no-compile --require-hashes -r /tmp/buildctl-requirements.txt; \\
      rm -f /tmp/buildctl-requirements.txt; \\
    fi; \\
    rm -rf /root/.cache /tmp/*; \\
""" + SETTLE
    out = r(gs, "compile-env:kernels")
    assert out.dockerfile == """\
# compile-env: what one component's compile needs, on the base (or cuDNN), nothing of the
# runtime layers (rendered by buildctl/graph/render.py)
FROM reg/stack/compile-env:kernels-parent:k
ARG BUILDCTL_WHEELHOUSE
COPY rootfs/ /
RUN set -eu; \\
    touch /tmp/.buildctl-stamp; \\
    export DEBIAN_FRONTEND=noninteractive PYTHONDONTWRITEBYTECODE=1 SOURCE_DATE_EPOCH=315532800; \\
""" + APT_KEEP + """\
    printf '%s\\n' 'deb [signed-by=/usr/share/keyrings/cuda.gpg] https://repo.example/sbsa /' > /etc/apt/sources.list.d/buildctl-cuda.list; \\
    apt-get update; \\
    apt-get install -y --no-install-recommends \\
      libibverbs-dev=50.0-2; \\
""" + APT_CLEAN + """\
    rm -rf /root/.cache /tmp/*; \\
""" + SETTLE


def test_wheel(gs: Any) -> None:
    out = r(gs, "wheel:engine")
    assert out.script == """\
#!/bin/sh
# wheel: compile one component into a wheel (rendered by buildctl/graph/render.py). buildctl runs it in a
# container of the component's compile-env image with the prepared source at /src (read-only) and /out
# for the wheel; BUILDCTL_JOBS is sized by buildctl from the builder's cores and memory.
# Unless the compiler cache is off, buildctl also mounts ccache at /buildctl/tools/ccache and its local
# cache folder at /ccache (a fleet's server comes as CCACHE_REMOTE_STORAGE): every compiler, nvcc
# included, then goes through it. Nothing below depends on whether it is there, so the cache never
# changes a key; this compile's own hits and misses go to /out/.buildctl-ccache-stats.json.
set -eu
rm -rf /tmp/buildctl-src
cp -a /src/. /tmp/buildctl-src/
cd /tmp/buildctl-src
export SOURCE_DATE_EPOCH=315532800
export ENGINE_ARCHS=100
export ENGINE_FRAMEWORK=pytorch
export MAX_JOBS="${BUILDCTL_JOBS:-1}"
if [ -x /buildctl/tools/ccache ]; then
  rm -rf /tmp/buildctl-ccache
  mkdir /tmp/buildctl-ccache
  for c in cc c++ gcc g++ clang clang++ "$(uname -m)-linux-gnu-gcc" "$(uname -m)-linux-gnu-g++"; do
    if command -v "$c" >/dev/null 2>&1; then ln -s /buildctl/tools/ccache "/tmp/buildctl-ccache/$c"; fi
  done
  nvcc="${CUDA_HOME:-${CUDA_PATH:-}}"
  if [ -n "$nvcc" ]; then nvcc="$nvcc/bin/nvcc"; else nvcc="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"; fi
  if [ -x "$nvcc" ]; then PYTORCH_NVCC="/buildctl/tools/ccache $nvcc"; export PYTORCH_NVCC; fi
  # A CC/CXX the image sets to a compiler's path (torch's extension build runs $CXX as given) would pass the
  # links: it names a link of the same name instead, and the compiler's own folder comes right after the links
  # on PATH, so that ccache runs that very compiler.
  first=""
  for v in CC CXX; do
    eval "c=\\${$v:-}"
    case "$c" in
      /*) if [ -f "$c" ] && [ -x "$c" ]; then
            [ -e "/tmp/buildctl-ccache/${c##*/}" ] || ln -s /buildctl/tools/ccache "/tmp/buildctl-ccache/${c##*/}"
            d="${c%/*}"
            first="${first}${d:-/}:"
            eval "$v=/tmp/buildctl-ccache/\\${c##*/}"
            export "$v"
          fi ;;
    esac
  done
  PATH="/tmp/buildctl-ccache:$first$PATH"
  CMAKE_C_COMPILER_LAUNCHER=/buildctl/tools/ccache
  CMAKE_CXX_COMPILER_LAUNCHER=/buildctl/tools/ccache
  CMAKE_CUDA_COMPILER_LAUNCHER=/buildctl/tools/ccache
  CCACHE_DIR=/ccache
  CCACHE_COMPILERCHECK=content
  CCACHE_STATSLOG=/tmp/buildctl-ccache.log
  export PATH CMAKE_C_COMPILER_LAUNCHER CMAKE_CXX_COMPILER_LAUNCHER CMAKE_CUDA_COMPILER_LAUNCHER
  export CCACHE_DIR CCACHE_COMPILERCHECK CCACHE_STATSLOG
fi
pip wheel --no-build-isolation --no-deps -w /out .
if [ -x /buildctl/tools/ccache ]; then
  /buildctl/tools/ccache --print-log-stats --format json > /out/.buildctl-ccache-stats.json \\
    || rm -f /out/.buildctl-ccache-stats.json
fi
"""
    assert out.dockerfile == """\
# wheel: the compiled wheel alone, so that another builder pulls it instead of compiling
# (rendered by buildctl/graph/render.py)
FROM scratch
COPY rootfs/ /
"""
    assert out.context == (ContextFile(path="rootfs/wheel/", wheel="engine"),)


def test_assemble_with_and_without_wheels(gs: Any) -> None:
    wf = WheelFile(filename="engine_core-2.10.0-cp312-cp312-linux_aarch64.whl", sha256="ab" * 32)
    out = r(gs, "assemble", wheels={"engine": wf})
    assert out.dockerfile == f"""\
# assemble: the compiled components' wheels, source-tree components at their paths, the runtime
# environment (rendered by buildctl/graph/render.py)
FROM reg/stack/assemble-parent:k
ARG BUILDCTL_WHEELHOUSE
COPY rootfs/ /
RUN set -eu; \\
    touch /tmp/.buildctl-stamp; \\
    export PYTHONDONTWRITEBYTECODE=1 SOURCE_DATE_EPOCH=315532800; \\
    wheelhouse_host=${{BUILDCTL_WHEELHOUSE#http://}}; wheelhouse_host=${{wheelhouse_host%%/*}}; \\
    if PIP_BREAK_SYSTEM_PACKAGES=1 PIP_CONSTRAINT= PIP_TRUSTED_HOST="$wheelhouse_host" python3 -B /usr/local/lib/buildctl-install.py --epoch 315532800 --installer "${{BUILDCTL_WHEELHOUSE}}tools/installer-0.7.0-py3-none-any.whl#sha256=05d1933f0a5ba7d8d6296bb6d5018e7c94fa473ceb10cf198a92ccea19c27b53" --find-links "${{BUILDCTL_WHEELHOUSE}}components/engine/" --find-links "${{BUILDCTL_WHEELHOUSE}}components/kernels/" -- \\
        'engine-core==2.10.0 --hash=sha256:{"ab" * 32}' \\
        'kernels==<built by wheel:kernels> --hash=sha256:<known after the compile>' \\
      ; then :; else \\
      rc=$?; [ "$rc" -eq 3 ] || exit "$rc"; \\
      printf '%s\\n' \\
        'engine-core==2.10.0 --hash=sha256:{"ab" * 32}' \\
        'kernels==<built by wheel:kernels> --hash=sha256:<known after the compile>' \\
        > /tmp/buildctl-requirements.txt; \\
      PIP_BREAK_SYSTEM_PACKAGES=1 PIP_CONSTRAINT= PIP_TRUSTED_HOST="$wheelhouse_host" python3 -m pip install --no-index --find-links "${{BUILDCTL_WHEELHOUSE}}components/engine/" --find-links "${{BUILDCTL_WHEELHOUSE}}components/kernels/" --only-binary=:all: --no-deps --no-cache-dir --no-compile --require-hashes -r /tmp/buildctl-requirements.txt; \\
      rm -f /tmp/buildctl-requirements.txt; \\
    fi; \\
    rm -rf /root/.cache /tmp/*; \\
""" + SETTLE + """\
ENV CUDA_DEVICE_MAX_CONNECTIONS="1" \\
    NVTE_FUSED_ATTN="1"
"""
    assert out.context == (ContextFile(path="rootfs/opt/trainer", tree="trainer"),
                           ContextFile(path="rootfs/usr/local/lib/buildctl-install.py", text=T.text("install.py")))
    assert out.wheelhouse


def test_entrypoint(gs: Any) -> None:
    out = r(gs, "entrypoint")
    assert out.dockerfile == """\
# entrypoint: the launch script, built only after the smoke gate passed (rendered by buildctl/graph/render.py)
FROM reg/stack/entrypoint-parent:k
COPY rootfs/ /
WORKDIR /opt/trainer
ENTRYPOINT ["/usr/local/bin/buildctl-launch"]
CMD []
"""
    assert out.context == (ContextFile(path="rootfs/usr/local/bin/buildctl-launch", mode="0755",
                                       text=gs.SCRIPT),)


def test_env_values_are_escaped(gs: Any) -> None:
    m = gs.load()
    m = replace(m, env={"A": 'x"y', "B": "$HOME\\z", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    gr = graph.build(m, gs.lock_for(m), m.variant("gpu13"), templates=T.digests(), extras=Extras(entrypoint=gs.ENTRY))
    text = render.render(gr.node("assemble"), templates=T, parent_ref="p").dockerfile
    assert text.endswith('ENV A="x\\"y" \\\n    B="\\$HOME\\\\z" \\\n    PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"\n')


def test_odd_paths_are_quoted_and_globs_kept(gs: Any) -> None:
    assert render._cleanup(["/tmp/*", "/opt/a b", "/x;rm"]) == ["rm -rf /tmp/* '/opt/a b' '/x;rm'; \\"]


def test_base_is_not_rendered(gs: Any) -> None:
    with pytest.raises(ValueError, match="not built from a Dockerfile"):
        render.render(g(gs).node("base"), templates=T, parent_ref="x")


# ------------------------------------------------------------------------------------- fragments


def test_fill_blocks_and_values(gs: Any) -> None:
    tpl = "FROM @@from@@\n    @@steps@@\n  @@gone@@\nEND\n"
    assert render.fill("t", tpl, {"from": "img", "steps": ["a; \\", "b; \\"], "gone": []}) == (
        "FROM img\n    a; \\\n    b; \\\nEND\n")


def test_fill_rejects_missing_and_unused_placeholders(gs: Any) -> None:
    with pytest.raises(TemplateError, match="no value for @@from@@"):
        render.fill("t", "FROM @@from@@\n", {})
    with pytest.raises(TemplateError, match="@@extra@@ missing"):
        render.fill("t", "FROM @@from@@\n", {"from": "x", "extra": "y"})
    with pytest.raises(TemplateError, match="must stand alone"):
        render.fill("t", "RUN @@steps@@ now\n", {"steps": ["a"]})


def test_template_digest_follows_its_files_only(gs: Any) -> None:
    d = T.digests()
    assert set(d) == set(specs.BUILT_KINDS)
    edited = Templates(texts={**T.texts, "system.Dockerfile.in": T.text("system.Dockerfile.in") + "# x\n"})
    assert {k for k, v in edited.digests().items() if v != d[k]} == {"system"}
    shared = Templates(texts={**T.texts, "_settle.sh.in": T.text("_settle.sh.in") + "\n"})
    assert all(v != d[k] for k, v in shared.digests().items())


def test_missing_fragment(gs: Any, tmp_path: Path) -> None:
    for f in IMAGES.iterdir():
        if f.is_file() and f.name != "system.Dockerfile.in":  # (a __pycache__ of protect.py may be there)
            (tmp_path / f.name).write_text(f.read_text())
    with pytest.raises(TemplateError, match=r"system.Dockerfile.in is missing"):
        render.load_templates(tmp_path)
    (tmp_path / "system.Dockerfile.in").write_text((IMAGES / "system.Dockerfile.in").read_text())
    assert render.load_templates(tmp_path).digests() == T.digests()


# --------------------------------------------------------------------------------- protect.py


def _protect() -> object:
    return load_script("protect_fragment", IMAGES / "protect.py")


def test_protect_problems(gs: Any) -> None:
    p = _protect()
    before = {"torch": "2.9.0a0+nv25.09", "nvidia-cublas": "13.0.0.19", "triton": "3.4.0"}
    after = {"torch": "2.9.0", "triton": "3.4.0"}
    assert p.problems(before, after, []) == [  # type: ignore[attr-defined]
        "nvidia-cublas 13.0.0.19 was removed", "torch 2.9.0a0+nv25.09 was replaced by 2.9.0"]
    assert p.problems(before, after, ["torch", "nvidia-*"]) == []  # type: ignore[attr-defined]
    assert p.problems(before, dict(before), []) == []  # type: ignore[attr-defined]


def test_protect_check_reads_the_snapshot(gs: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = _protect()
    snap = tmp_path / "before.json"
    # a made-up protected distribution: certainly not installed here, so the check sees it removed
    snap.write_text('{"patterns": ["zz-made-up-*"], "packages": {"zz-made-up-core": "1.0"}}')
    assert p.main(["check", str(snap)]) == 1  # type: ignore[attr-defined]
    assert "zz-made-up-core 1.0 was removed" in capsys.readouterr().err
    assert p.main(["check", str(snap), "--replace", "zz-made-up-core"]) == 0  # type: ignore[attr-defined]
    assert p.installed(["pyyaml"]).get("pyyaml")  # type: ignore[attr-defined]


def test_keyring_package_is_installed_before_its_source(gs: Any) -> None:
    m = gs.load()
    m = replace(m, downloads=tuple(replace(d, dest="/tmp/cuda-keyring_1.1-1_all.deb") if d.name == "cuda-keyring"
                                   else d for d in m.downloads))
    gr = graph.build(m, gs.lock_for(m), m.variant("gpu13"), templates=T.digests(), extras=Extras(entrypoint=gs.ENTRY))
    text = render.render(gr.node("cudnn"), templates=T, parent_ref="p").dockerfile
    assert """\
    dpkg -i /tmp/cuda-keyring_1.1-1_all.deb; \\
    rm -f /tmp/cuda-keyring_1.1-1_all.deb; \\
    printf '%s\\n' 'deb [signed-by=/usr/share/keyrings/cuda.gpg] https://repo.example/sbsa /' > /etc/apt/sources.list.d/buildctl-cuda.list; \\
    apt-get update; \\
""" in text


def test_copy_lines() -> None:
    files = [ContextFile(path="rootfs/opt/demo/a.deb", download="a"), ContextFile(path="rootfs/opt/demo/b.tgz", download="b"),
             ContextFile(path="rootfs/tmp/k.deb", download="k"), ContextFile(path="rootfs/usr/bin/yq", download="yq"),
             ContextFile(path="rootfs/opt/tree", tree="t"), ContextFile(path="wheel/", wheel="w")]
    # one COPY of the whole tree: every folder on the way is copied with its mtime and mode (dir_mode)
    assert render._copy(files) == ["COPY rootfs/ /"]
    assert render._copy([ContextFile(path="other/x", text="")]) == []
    assert [render.dir_mode(p) for p in ("tmp", "var/tmp", "root", "opt", "opt/demo", "root/x")] == [
        0o1777, 0o1777, 0o700, 0o755, 0o755, 0o755]


def test_deepseek_wheel_scripts_carry_what_their_compiles_need() -> None:
    """The rendered compile scripts of the deepseek-v3-gb200 hopper variant, as the H200 run compiled them
    (tests/data/gpu/): DeepEP with NVSHMEM under CUDA 13 needs CPATH at CCCL's headers; TE's compile-env
    installs nvidia-mathdx (TE's CMake asks pip for it) before the wheel node runs TE's build."""
    from buildctl.graph.launch_script import render_entrypoint_fragment
    from buildctl.manifest import pins

    m = pins.load(IMAGES.parent / "pins" / "deepseek-v3-gb200.yaml")
    v = m.variant("hopper")
    gr = graph.build(m, None, v, templates=T.digests(), extras=Extras(entrypoint=render_entrypoint_fragment(m, v)))
    deepep = render.render(gr.node("wheel:deepep-hybridep"), templates=T, parent_ref="p:k").script or ""
    assert "export CPATH=/usr/local/cuda/include/cccl\n" in deepep
    assert "export TORCH_CUDA_ARCH_LIST=9.0\n" in deepep
    te_env = render.render(gr.node("compile-env:transformer-engine"), templates=T, parent_ref="p:k").dockerfile
    assert "nvidia-mathdx==25.1.1" in te_env

