"""An image as its registry describes it (manifest + config), and what it adds against another (pure arithmetic).

``remote_image`` reads one image manifest and its config blob through the registry client: the layers
(compressed digest and size, as pushed) with their diff IDs (the uncompressed content, from the
config's ``rootfs.diff_ids``), and the labels. ``layer_delta`` compares a candidate with the image a
moving tag points at now (the last promoted one): each layer of the candidate is ``same`` (the same
content at the same place), ``shared`` (content the old image has elsewhere), ``rewritten`` (a new
content where the old image had another) or ``added`` (past the end of the old image); the bytes a
puller fetches anew are those of the rewritten and added layers. ``check_budget`` holds that sum to the
manifest's budget.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from buildctl import untrusted
from buildctl.errors import PushError
from buildctl.registry.registry import DOCKER_LIST, DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST, Descriptor

_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}\Z")
LayerStatus = Literal["same", "shared", "rewritten", "added"]
MAX_CONFIG = 8 << 20


class ImageRegistry(Protocol):
    def manifest(self, repo: str, reference: str) -> tuple[bytes, Descriptor] | None: ...
    def get_blob(self, repo: str, digest: str) -> bytes | None: ...


@dataclass(frozen=True, kw_only=True)
class Layer:
    digest: str  # the blob as pushed (compressed)
    size: int  # its bytes in the registry
    diff_id: str  # the uncompressed content


@dataclass(frozen=True, kw_only=True)
class RemoteImage:
    repository: str  # host/path
    digest: str  # manifest digest
    config: str  # the config blob's digest: the image id an engine shows for it
    layers: tuple[Layer, ...]
    labels: Mapping[str, str] = field(default_factory=dict)
    created_by: tuple[str, ...] = ()  # the history line of each layer (empty layers left out), as far as known

    @property
    def size(self) -> int:
        return sum(layer.size for layer in self.layers)


def remote_image(client: ImageRegistry, repository: str, reference: str) -> RemoteImage | None:
    """The image manifest ``reference`` (tag or digest) names in ``repository`` (``host/path``), or None."""
    path = repository.split("/", 1)[1]
    got = client.manifest(path, reference)
    if got is None:
        return None
    body, desc = got
    where = f"{repository}@{desc.digest}"
    try:
        doc = untrusted.obj(untrusted.loads(body), "the manifest")
    except ValueError as exc:
        raise PushError(f"{where}: not an image manifest ({exc})", fix="check the registry") from None
    media = doc.get("mediaType")
    if media in (OCI_INDEX, DOCKER_LIST):
        raise PushError(f"{where} is a multi-platform index, not one image",
                        fix="name the manifest of one platform (its digest)")
    if media not in (OCI_MANIFEST, DOCKER_MANIFEST) or not isinstance(doc.get("layers"), list):
        raise PushError(f"{where}: not an image manifest ({str(media)[:80]})", fix="check the registry")
    config_desc = Descriptor.from_json(doc.get("config"), where)
    raw = client.get_blob(path, config_desc.digest)
    if raw is None or len(raw) > MAX_CONFIG:
        raise PushError(f"{where}: its config blob {config_desc.digest} is missing or too large",
                        fix="push the image again")
    try:  # registry content: every value's type checked before use (buildctl/untrusted.py)
        config = untrusted.obj(untrusted.loads(raw), "the config blob")
        diff_ids = untrusted.array(untrusted.obj(config.get("rootfs"), "rootfs").get("diff_ids"), "rootfs.diff_ids")
        labels = untrusted.str_map(untrusted.obj(config.get("config") or {}, "config").get("Labels"),
                                   "config.Labels")
        history = [str(h.get("created_by") or "") for i, h in enumerate(
            untrusted.array(config.get("history") or [], "history"))
            if not untrusted.obj(h, f"history[{i}]").get("empty_layer")]
    except ValueError as exc:
        raise PushError(f"{where}: its config is not an image config ({exc})", fix="check the registry") from None
    layers = [Descriptor.from_json(entry, where) for entry in doc["layers"]]
    if len(diff_ids) != len(layers) or not all(isinstance(d, str) and _DIGEST.match(d) for d in diff_ids):
        raise PushError(f"{where}: {len(layers)} layer(s) but {len(diff_ids)} diff ID(s) in its config",
                        fix="check the registry")
    return RemoteImage(repository=repository, digest=desc.digest, config=config_desc.digest,
                       layers=tuple(Layer(digest=d.digest, size=d.size, diff_id=i) for d, i in zip(layers, diff_ids, strict=True)),
                       labels=labels,
                       created_by=tuple(str(h)[:200] for h in history) if len(history) == len(layers) else ())


def begins_with(image: RemoteImage, base: RemoteImage) -> bool:
    """Whether ``image`` is ``base`` plus layers on top (the same content, in order, at the bottom)."""
    return [x.diff_id for x in image.layers[:len(base.layers)]] == [x.diff_id for x in base.layers]


# ------------------------------------------------------------------------------------------ the delta


@dataclass(frozen=True, kw_only=True)
class LayerChange:
    index: int
    status: LayerStatus
    diff_id: str
    size: int  # bytes in the registry (compressed)
    created_by: str = ""

    @property
    def new_bytes(self) -> int:
        return self.size if self.status in ("rewritten", "added") else 0

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "status": self.status, "diff_id": self.diff_id, "size": self.size,
                "new_bytes": self.new_bytes, "created_by": self.created_by}


@dataclass(frozen=True, kw_only=True)
class SizeReport:
    image: str  # repository@digest of the candidate
    against: str  # repository@digest of the last promoted image ("" when there is none)
    against_tag: str  # the moving tag read
    layers: tuple[LayerChange, ...]
    budget: int | None = None  # bytes
    fail: bool = False  # whether going over fails the promotion

    @property
    def new_bytes(self) -> int:
        return sum(c.new_bytes for c in self.layers)

    @property
    def total(self) -> int:
        return sum(c.size for c in self.layers)

    @property
    def over(self) -> bool:
        """Over the budget; the first image of a variant (nothing promoted yet) is held to none."""
        return self.budget is not None and bool(self.against) and self.new_bytes > self.budget

    def summary(self) -> str:
        counts = {s: sum(1 for c in self.layers if c.status == s) for s in ("same", "shared", "rewritten", "added")}
        against = f"against {self.against_tag} ({self.against})" if self.against else \
            f"no image under {self.against_tag} yet: every layer is new"
        budget = "" if self.budget is None or not self.against else (
            f"; OVER the budget of {self.budget} bytes by {self.new_bytes - self.budget}" if self.over
            else f"; within the budget of {self.budget} bytes")
        return (f"{self.new_bytes} byte(s) added or rewritten of {self.total} ({counts['added']} layer(s) added, "
                f"{counts['rewritten']} rewritten, {counts['same'] + counts['shared']} unchanged) {against}{budget}")

    def to_json(self) -> dict[str, Any]:
        return {"image": self.image, "against": self.against, "against_tag": self.against_tag,
                "new_bytes": self.new_bytes, "total_bytes": self.total, "budget": self.budget, "fail": self.fail,
                "over": self.over, "summary": self.summary(), "layers": [c.to_json() for c in self.layers]}


def layer_delta(new: Sequence[Layer], old: Sequence[Layer], created_by: Sequence[str] = ()) -> tuple[LayerChange, ...]:
    """Each layer of ``new`` against ``old`` (pure)."""
    old_ids = {x.diff_id for x in old}
    out = []
    for i, layer in enumerate(new):
        if i < len(old) and old[i].diff_id == layer.diff_id:
            status: LayerStatus = "same"
        elif layer.diff_id in old_ids:
            status = "shared"
        elif i < len(old):
            status = "rewritten"
        else:
            status = "added"
        out.append(LayerChange(index=i, status=status, diff_id=layer.diff_id, size=layer.size,
                               created_by=created_by[i] if i < len(created_by) else ""))
    return tuple(out)


def size_report(candidate: RemoteImage, promoted: RemoteImage | None, *, against_tag: str, budget: int | None,
                fail: bool) -> SizeReport:
    return SizeReport(image=f"{candidate.repository}@{candidate.digest}",
                      against=f"{promoted.repository}@{promoted.digest}" if promoted else "", against_tag=against_tag,
                      layers=layer_delta(candidate.layers, promoted.layers if promoted else (), candidate.created_by),
                      budget=budget, fail=fail)
