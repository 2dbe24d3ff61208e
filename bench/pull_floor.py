"""(c2)'s floor: what a fresh builder pays to pull one image before anything can run in it, and whether the
layers' compression is what it pays for.

    python3 bench/pull_floor.py 127.0.0.1:5000/REPO:TAG [--reps 2] [--out bench/results]

The image (a compile environment that `make bench` or `buildctl push` left in a registry on this machine) is
pulled as the registry has it (gzip layers), and the same layers, re-pushed beside it under the same repository
with tags of this run, uncompressed and zstd-compressed (OCI media types; the config is the same bytes, so the
image is the same). Each pull goes into a fresh second engine of its own (bench.engine2: empty data-root, its
own bridge), in an order that rotates per repetition, and is timed from `docker pull` to its end. A form the
engine refuses is recorded with its error (Debian 12's engine 20.10 cannot unpack zstd layers). If the
uncompressed layers pull no faster than gzip's, decompression is not what bounds the pull: writing the files
is, and no compression buildctl could push would shorten it.

Side by side in one run, reported as ratios against the gzip pull; the result goes to OUT as
<time>-pullfloor.json. The run's two tags (pullfloor-<run>-tar, -zstd) stay in the registry, which must be on
127.0.0.1: this is a bench of this machine.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import say  # noqa: E402
from bench.engine2 import second_engine  # noqa: E402
from bench.figures import uptime  # noqa: E402
from buildctl import imageref, safepath  # noqa: E402
from buildctl.errors import BuildctlError, UsageError  # noqa: E402
from buildctl.registry.registry import RegistryClient  # noqa: E402

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = {"tar": "application/vnd.oci.image.layer.v1.tar", "gzip": "application/vnd.oci.image.layer.v1.tar+gzip",
         "zstd": "application/vnd.oci.image.layer.v1.tar+zstd"}
BIG = 8 << 30  # a layer read back whole (a compile environment's layers are hundreds of MB)


class FloorError(Exception):
    """The bench cannot run (the message says why)."""


def split_ref(ref: str) -> tuple[str, str, str]:
    """host, repository, tag of ``HOST:PORT/REPO:TAG`` on loopback (127.0.0.1 or localhost, a port of 1-65535),
    each part held to the rule buildctl's registry client holds it to, so that a malformed one is this message and
    not that client's error (a traceback here)."""
    host, _, rest = ref.partition("/")
    repo, _, tag = rest.rpartition(":")
    name, _, port = host.partition(":")
    # the grammar is imageref.problem's (docker's, as the commands check IMAGE); here also: loopback, a port, a tag
    if not (name in ("127.0.0.1", "localhost") and port.isdigit() and repo and tag and "@" not in ref
            and imageref.problem(ref) is None):
        raise FloorError(f"not an image of a registry on this machine: {ref!r} (give 127.0.0.1:PORT/REPO:TAG)")
    return host, repo, tag


def zstd(data: bytes) -> bytes:
    done = subprocess.run(["zstd", "-3", "-T0", "-q", "-c"], input=data, capture_output=True, check=False)
    if done.returncode != 0:
        raise FloorError(f"zstd failed: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def forms(client: RegistryClient, repo: str, tag: str, run_id: str) -> dict[str, dict[str, Any]]:
    """The image as the registry has it, and re-pushed with uncompressed and zstd layers: form -> tag, bytes."""
    got = client.manifest(repo, tag)
    if got is None:
        raise FloorError(f"the registry has no {repo}:{tag}")
    man = json.loads(got[0])
    if "layers" not in man:
        raise FloorError(f"{repo}:{tag} is not one image's manifest (an index?): give a platform's image")
    config = client.get_blob(repo, man["config"]["digest"], limit=BIG)
    if config is None:
        raise FloorError(f"the registry lacks the config of {repo}:{tag}")
    out: dict[str, dict[str, Any]] = {"gzip": {"tag": tag, "bytes": sum(x["size"] for x in man["layers"])}}
    kinds = ["tar", *(["zstd"] if shutil.which("zstd") else [])]
    layers: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for x in man["layers"]:
        blob = client.get_blob(repo, x["digest"], limit=BIG)
        if blob is None:
            raise FloorError(f"the registry lacks layer {x['digest']} of {repo}:{tag}")
        raw = gzip.decompress(blob)
        for k in kinds:
            data = raw if k == "tar" else zstd(raw)
            layers[k].append(client.push_blob(repo, data, LAYER[k]).to_json())
    cfg = client.push_blob(repo, config, OCI_CONFIG).to_json()
    for k in kinds:
        body = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": cfg, "layers": layers[k]},
                          sort_keys=True).encode()
        client.put_manifest(repo, f"pullfloor-{run_id}-{k}", body, OCI_MANIFEST)
        out[k] = {"tag": f"pullfloor-{run_id}-{k}", "bytes": sum(x["size"] for x in layers[k])}
    return out


def pull_once(ref: str, bridges: list[str]) -> dict[str, Any]:
    """One `docker pull` of ``ref`` into a fresh second engine: seconds, or the engine's error."""
    with second_engine(bridges) as e2:
        start = time.monotonic()
        done = subprocess.run(["docker", "-H", e2.address, "pull", "-q", ref], capture_output=True, text=True,
                              check=False, timeout=900)
        seconds = time.monotonic() - start
    if done.returncode != 0:
        return {"seconds": None, "error": done.stderr.strip()[-300:]}
    return {"seconds": round(seconds, 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ref", help="HOST:PORT/REPO:TAG of an image in a registry on 127.0.0.1")
    ap.add_argument("--reps", type=int, default=2, help="pulls of each form (default 2, at most 5)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results", help="folder for the JSON result")
    args = ap.parse_args(argv)
    try:
        if not 1 <= args.reps <= 5:
            raise FloorError("--reps must be 1-5")
        host, repo, tag = split_ref(args.ref)
        try:
            safepath.usable_folder(args.out, "--out")  # before the pulls, not after them
        except UsageError as exc:
            raise FloorError(exc.what) from None
        started = datetime.datetime.now(datetime.UTC)
        res: dict[str, Any] = {"ref": args.ref, "started": started.isoformat(timespec="seconds"),
                               "load_before": uptime(), "reps": args.reps}
        run_id = uuid.uuid4().hex[:8]
        client = RegistryClient(host, timeout=120.0)
        say(f"re-pushing the layers of {args.ref} uncompressed and zstd-compressed")
        made = forms(client, repo, tag, run_id)
        res["forms"] = made
        order = list(made)
        pulls: dict[str, list[dict[str, Any]]] = {k: [] for k in order}
        bridges: list[str] = []
        for r in range(args.reps):
            for k in order[r % len(order):] + order[:r % len(order)]:
                p = pull_once(f"{host}/{repo}:{made[k]['tag']}", bridges)
                pulls[k].append(p)
                say(f"  {k}: " + (f"{p['seconds']:.2f} s" if p["seconds"] is not None else f"refused: {p['error']}"))
        res["pulls"] = pulls
        res["load_after"] = uptime()
        if any(p["seconds"] is None for p in pulls["gzip"]):
            raise FloorError(f"the image as the registry has it did not pull: {pulls['gzip']}")
    except FloorError as exc:
        print(f"pull_floor: {exc}", file=sys.stderr)
        return 2
    except BuildctlError as exc:  # the registry or engine refused, or did not answer
        print(f"pull_floor: {exc}", file=sys.stderr)
        return 1
    gz = statistics.median(p["seconds"] for p in pulls["gzip"])
    lines = []
    for k in order:
        ok = [p["seconds"] for p in pulls[k] if p["seconds"] is not None]
        cell = (f"median {statistics.median(ok):.2f} s ({', '.join(f'{s:.2f}' for s in ok)}), "
                f"gzip's over it {gz / statistics.median(ok):.2f}x") if ok else f"refused: {pulls[k][0]['error']}"
        lines.append(f"{k:>5} layers, {made[k]['bytes']:,} bytes: {cell}")
    res["summary"] = lines
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"{started.strftime('%Y%m%dT%H%M%SZ')}-pullfloor.json"
    out.write_text(json.dumps(res, indent=2, sort_keys=True) + "\n")
    print("\n".join([f"pull of {args.ref} into a fresh engine, by layer compression:", *lines,
                     f"load before: {res['load_before']}; after: {res['load_after']}", f"results: {out}"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
