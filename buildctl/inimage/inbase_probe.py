"""Runs INSIDE a base image for `buildctl lock`: what its pip and apt would pick there.

This file is copied into a throw-away container of the pulled base and run with the base's own
python3, so it uses only the standard library and stays compatible with Python 3.8 (NGC images ship
3.10 to 3.12). It never installs anything: pip runs with --dry-run, apt only updates its lists. The
container is removed afterwards, so the removals the manifest asks for (remove.pip, remove.paths)
can be applied for real before the runtime requirements are resolved, as the image's layers will.

Input: a JSON request (path in argv[1]); output: one line ``BUILDCTL-PROBE-RESULT:<json>`` on stdout.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any

MARK = "BUILDCTL-PROBE-RESULT:"
TAIL = 4000  # characters of a failing tool's output handed back


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed() -> dict[str, str]:
    from importlib import metadata

    out: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        # The first one on sys.path is the one `import` and pip see.
        if name and canon(name) not in out:
            out[canon(name)] = dist.version
    return out


def supported_tags() -> list[str]:
    try:
        from pip._vendor.packaging import tags
    except ImportError:
        return []
    return [str(t) for t in tags.sys_tags()]


def run(cmd: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                          text=True)
    return proc.returncode, proc.stdout


def constraints_for(requirements: list[str]) -> list[str]:
    """Lines of the PIP_CONSTRAINT file(s) that name one of ``requirements`` (to explain a conflict)."""
    names = set()
    for r in requirements:
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", r)
        if m:
            names.add(canon(m.group(1)))
    found = []
    for path in os.environ.get("PIP_CONSTRAINT", "").split():
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for line in lines:
            m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)
            if m and canon(m.group(1)) in names:
                found.append(f"{path}: {line.strip()}")
    return found


def pip_dry_run(requirements: list[str], timeout: int) -> dict[str, Any]:
    workdir = tempfile.mkdtemp(prefix="buildctl-")
    req = os.path.join(workdir, "requirements.txt")
    report = os.path.join(workdir, "report.json")
    with open(req, "w") as f:
        f.write("\n".join(requirements) + "\n")
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--no-input",
           "--disable-pip-version-check", "--root-user-action=ignore", "--timeout", str(timeout),
           "--retries", "0", "--report", report, "-r", req]
    rc, out = run(cmd)
    if rc != 0:
        return {"error": out[-TAIL:], "command": " ".join(cmd), "constraints": constraints_for(requirements)}
    with open(report) as f:
        data = json.load(f)
    items = []
    for item in data.get("install", []):
        meta = item.get("metadata", {})
        info = item.get("download_info", {})
        archive = info.get("archive_info", {})
        sha = archive.get("hashes", {}).get("sha256")
        if not sha and str(archive.get("hash", "")).startswith("sha256="):
            sha = archive["hash"].split("=", 1)[1]
        items.append({"name": canon(meta.get("name", "")), "version": meta.get("version", ""),
                      "url": info.get("url", ""), "sha256": sha, "requested": bool(item.get("requested"))})
    shutil.rmtree(workdir, ignore_errors=True)
    return {"install": items}


def apt_probe(request: dict[str, Any]) -> dict[str, Any]:
    for name, line in sorted(request.get("apt_sources", {}).items()):
        with open(f"/etc/apt/sources.list.d/buildctl-{name}.list", "w") as f:
            f.write(line + "\n")
    for deb in request.get("apt_debs", []):
        rc, out = run(["dpkg", "-i", deb])
        if rc != 0:
            return {"error": f"dpkg -i {deb} failed:\n{out[-TAIL:]}"}
    timeout = str(int(request.get("timeout", 10)))
    opts = ["-o", "Acquire::Retries=0", "-o", "Acquire::http::Timeout=" + timeout,
            "-o", "Acquire::https::Timeout=" + timeout]
    if request.get("ca_file"):
        opts += ["-o", "Acquire::https::CAInfo=" + request["ca_file"]]
    rc, out = run(["apt-get", *opts, "update"])
    # apt-get update exits 0 when some lists failed ("W: Failed to fetch"): a lock made from stale or
    # missing lists would be wrong, so any failed fetch counts.
    failed = [ln for ln in out.splitlines() if ln.startswith(("Err:", "E:", "W: Failed to fetch"))]
    if rc != 0 or failed:
        return {"error": out[-TAIL:]}
    names = sorted(set(request.get("apt", [])))
    offered: dict[str, list[str]] = {n: [] for n in names}
    if names:
        rc, out = run(["apt-cache", "madison", *names])
        for line in out.splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) >= 3 and parts[0] in offered and parts[1] not in offered[parts[0]]:
                offered[parts[0]].append(parts[1])
        for n in names:
            rc, out = run(["dpkg-query", "-W", "-f=${Version}", n])
            if rc == 0 and out.strip() and out.strip() not in offered[n]:
                offered[n].append(out.strip())
    return {"offered": offered}


def main() -> int:
    with open(sys.argv[1]) as f:
        request = json.load(f)
    timeout = int(request.get("timeout", 10))
    result: dict[str, Any] = {"python": ".".join(str(n) for n in sys.version_info[:3]), "tags": supported_tags(),
                              "installed": installed(), "build_pip": {}}
    if request.get("unset_constraint"):
        os.environ["PIP_CONSTRAINT"] = ""
    # Compile nodes build on the unmodified base: resolve their build requirements first.
    for component, reqs in sorted(request.get("build_pip", {}).items()):
        result["build_pip"][component] = pip_dry_run(reqs, timeout)
    removed = request.get("remove_pip", [])
    if removed:
        rc, out = run([sys.executable, "-m", "pip", "uninstall", "-y", "--root-user-action=ignore", *removed])
        if rc != 0:
            result["remove_error"] = out[-TAIL:]
    for path in request.get("remove_paths", []):
        shutil.rmtree(path, ignore_errors=True)
    result["installed_after_remove"] = installed()
    if request.get("pip"):
        result["pip"] = pip_dry_run(request["pip"], timeout)
    if request.get("apt"):
        result["apt"] = apt_probe(request)
    sys.stdout.write("\n" + MARK + json.dumps(result, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
