"""The engine's local images: inspect, tag, remove, save and load (docker's inspect data becomes ImageInfo)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from buildctl.engine import lazy
from buildctl.engine.client import Client, _explanation
from buildctl.engine.values import HistoryEntry, ImageInfo, split_ref
from buildctl.errors import (
    EngineError,
)

if TYPE_CHECKING:  # the real modules for the type checker; at run time imported on first use (lazy.py)
    import docker
    import docker.errors
    import docker.types
else:
    docker = lazy.Module("docker")


WIRE_LOAD_MAX = 64 << 20  # a `docker load` archive up to this size is sent in one request (Images.load)


class Images(Client):
    """The engine's local images: inspect, tag, remove, save, load."""

    def image_exists(self, ref: str) -> bool:
        return self.image_id(ref) is not None

    def image_id(self, ref: str) -> str | None:
        if self._wire() is not None:
            attrs = self._json(f"/images/{ref}/json", f"inspect {ref}", dict)
            return None if attrs is None else str(attrs["Id"])
        with self._errors(f"inspect {ref}"):
            try:
                return str(self._api().inspect_image(ref)["Id"])
            except docker.errors.NotFound:
                return None

    def inspect_image(self, ref: str) -> ImageInfo:
        if self._wire() is not None:
            def missing(why: str) -> EngineError:
                return EngineError(f"image {ref} is not in engine {self.name!r}", why=why,
                                   fix="build it, or pull it first")

            return _image_info(self._json(f"/images/{ref}/json", f"inspect {ref}", dict, missing=missing),
                               self._json(f"/images/{ref}/history", f"inspect {ref}", list, missing=missing))
        with self._errors(f"inspect {ref}"):
            try:
                attrs = self._api().inspect_image(ref)
                history = self._api().history(ref)
            except docker.errors.NotFound as exc:
                raise EngineError(
                    f"image {ref} is not in engine {self.name!r}",
                    why=_explanation(exc),
                    fix="build it, or pull it first",
                ) from exc
        return _image_info(attrs, history)

    def tag(self, image: str, ref: str) -> None:
        repo, tag = split_ref(ref)
        if self._wire() is not None:
            answer = self._call("POST", f"/images/{image}/tag", f"tag {image} as {ref}",
                                {"repo": repo, "tag": tag})
            if answer.status == 404:
                raise EngineError(f"cannot tag {image} as {ref}: no such image", why=answer.message)
            if answer.status not in (200, 201):
                raise self._refused(f"tag {image} as {ref}", answer.message)
            return
        with self._errors(f"tag {image} as {ref}"):
            try:
                self._api().tag(image, repo, tag, force=True)
            except docker.errors.NotFound as exc:
                raise EngineError(
                    f"cannot tag {image} as {ref}: no such image", why=_explanation(exc)
                ) from exc

    def remove_image(self, ref: str, force: bool = False) -> None:
        """Remove a tag (or the image, once no tag is left); a missing one is already removed."""
        if self._wire() is not None:
            answer = self._call("DELETE", f"/images/{ref}", f"remove {ref}",
                                {"force": "1" if force else "0"})
            if answer.status not in (200, 404):
                raise self._refused(f"remove {ref}", answer.message,
                                    fix="a container still uses it: remove that container, or pass force=True")
            return
        with self._errors(
            f"remove {ref}", fix="a container still uses it: remove that container, or pass force=True"
        ):
            try:
                self._api().remove_image(ref, force=force)
            except docker.errors.NotFound:
                return


    # -- archives

    def save(self, ref: str, dest: Path) -> None:
        """`docker save` of ``ref`` into ``dest`` (written whole or not at all)."""
        part = dest.with_name(dest.name + ".part")
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self._errors(f"save of {ref}"), part.open("wb") as f:
                try:
                    for chunk in self._api(self.stream_timeout).get_image(ref):
                        f.write(chunk)
                except docker.errors.NotFound as exc:
                    raise EngineError(f"cannot save {ref}: no such image", why=_explanation(exc)) from exc
            part.replace(dest)
        finally:
            part.unlink(missing_ok=True)

    def load(self, tar: Path) -> list[str]:
        """`docker load`; return what the engine loaded (tags, or image ids for untagged images). A small archive
        (a thin one: compose.py, normalise.py) goes in one request on the unix socket, without docker-py."""
        loaded: list[str] = []
        error = ""

        def read(chunk: Mapping[str, Any]) -> None:
            nonlocal error
            if "error" in chunk:
                error = error or str(chunk["error"])
            for line in str(chunk.get("stream", "")).splitlines():
                m = re.match(r"Loaded image(?: ID)?: (\S+)", line.strip())
                if m:
                    loaded.append(m.group(1))

        if self._wire() is not None and tar.stat().st_size <= WIRE_LOAD_MAX:
            answer = self._call("POST", "/images/load", f"load of {tar}", {"quiet": "1"}, timeout=self.stream_timeout,
                                body=tar.read_bytes(), content_type="application/x-tar")
            if answer.status != 200:
                raise self._refused(f"load of {tar}", answer.message)
            for line in answer.body.splitlines():
                try:
                    chunk = json.loads(line)
                except ValueError:
                    continue
                if isinstance(chunk, dict):
                    read(chunk)
        else:
            with self._errors(f"load of {tar}"), tar.open("rb") as f:
                for chunk in self._api(self.stream_timeout).load_image(f):
                    read(chunk)
        if error:
            raise EngineError(f"load of {tar} failed", why=error, fix="check that the file is a `docker save` archive")
        return loaded


def _tuple(value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple):
        return tuple(str(v) for v in value)
    return None


def _layer_dirs(driver: Mapping[str, Any]) -> tuple[str, ...]:
    """overlay2's diff folders of an image, top layer first; () for another driver or incomplete data."""
    data = driver.get("Data") or {}
    if driver.get("Name") != "overlay2" or not isinstance(data, Mapping) or not data.get("UpperDir"):
        return ()
    lower = str(data.get("LowerDir") or "")
    return (str(data["UpperDir"]), *(d for d in lower.split(":") if d))


def _image_info(attrs: Mapping[str, Any], history: Sequence[Mapping[str, Any]]) -> ImageInfo:
    config = attrs.get("Config") or {}
    env: dict[str, str] = {}
    for item in config.get("Env") or ():
        k, _, v = str(item).partition("=")
        env[k] = v
    platform = f"{attrs.get('Os', 'linux')}/{attrs.get('Architecture', 'unknown')}"
    if attrs.get("Variant"):
        platform += f"/{attrs['Variant']}"
    return ImageInfo(
        id=str(attrs["Id"]),
        repo_tags=tuple(str(t) for t in attrs.get("RepoTags") or ()),
        repo_digests=tuple(str(d) for d in attrs.get("RepoDigests") or ()),
        labels={str(k): str(v) for k, v in (config.get("Labels") or {}).items()},
        env=env,
        entrypoint=_tuple(config.get("Entrypoint")),
        cmd=_tuple(config.get("Cmd")),
        platform=platform,
        created=str(attrs.get("Created", "")),
        layers=tuple(str(x) for x in (attrs.get("RootFS") or {}).get("Layers") or ()),
        workdir=str(config.get("WorkingDir") or ""),
        user=str(config.get("User") or ""),
        storage_driver=str((attrs.get("GraphDriver") or {}).get("Name") or ""),
        layer_dirs=_layer_dirs(attrs.get("GraphDriver") or {}),
        history=tuple(
            HistoryEntry(
                created=int(h.get("Created") or 0),
                created_by=str(h.get("CreatedBy") or ""),
                size=int(h.get("Size") or 0),
                comment=str(h.get("Comment") or ""),
                tags=tuple(str(t) for t in h.get("Tags") or ()),
            )
            for h in history
        ),
    )
