"""The pin changes between two locks of a variant, applied one at a time, and the bisection over them (pure).

`buildctl bisect` looks for the change that makes a smoke check fail between a good and a bad lock:

- ``pin_changes(good, bad)``: every unit that differs, in a fixed order (base; components by name;
  downloads; apt; build apt; pip; build pip, each by name). A component is one unit (its base commit,
  changes, tree and submodules move together: the tree follows from all of them);
- ``apply(good, bad, changes)``: the good lock with those units taken from the bad one. With every change
  applied it is the bad lock (the same digest);
- ``Bisection``: binary search over n candidates ordered so that before the first all is good and the last
  is bad; each ``record`` halves the range, ``culprit`` is the first bad one. Used for the prefixes of
  the change list (candidate k: the first k+1 changes applied) and for a component's commits (first-parent
  history between the good and the bad commit, oldest first, the bad commit last).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from buildctl.lock.lockfile import LockedPip, VariantLock

Section = Literal["base", "component", "download", "apt", "build-apt", "pip", "build-pip"]
SECTIONS: tuple[Section, ...] = ("base", "component", "download", "apt", "build-apt", "pip", "build-pip")
NONE = "(none)"


@dataclass(frozen=True, kw_only=True)
class PinChange:
    section: Section
    name: str  # the component, download or package; "<component>/<package>" for build apt and build pip
    old: str
    new: str

    def label(self) -> str:
        what = {"base": "base image", "component": "component", "download": "download", "apt": "apt",
                "build-apt": "build apt", "pip": "pip", "build-pip": "build pip"}[self.section]
        return f"{what} {self.name}: {self.old} -> {self.new}" if self.name else f"{what}: {self.old} -> {self.new}"

    def to_json(self) -> dict[str, str]:
        return {"section": self.section, "name": self.name, "old": self.old, "new": self.new, "label": self.label()}


def _pip_text(pip: LockedPip | None) -> str:
    return NONE if pip is None else pip.version + (" (in base)" if pip.in_base else "")


def _maps(section: Section, prefix: str, old: Mapping[str, Any], new: Mapping[str, Any],
          show: Callable[[Any], str] = str) -> list[PinChange]:
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if a != b:
            out.append(PinChange(section=section, name=f"{prefix}{k}",
                                 old=NONE if a is None else show(a), new=NONE if b is None else show(b)))
    return out


def pin_changes(good: VariantLock, bad: VariantLock) -> list[PinChange]:
    """Every unit that differs between the two locks, in the fixed order of SECTIONS, each by name."""
    out: list[PinChange] = []
    if good.base != bad.base:
        out.append(PinChange(section="base", name="", old=good.base.digest if good.base else NONE,
                             new=bad.base.digest if bad.base else NONE))
    for name in sorted(set(good.components) | set(bad.components)):
        a, b = good.components.get(name), bad.components.get(name)
        if a is None or b is None or dataclasses.replace(a, branch_head="") != dataclasses.replace(b, branch_head=""):
            out.append(PinChange(section="component", name=name, old=a.commit if a else NONE,
                                 new=b.commit if b else NONE))
    out += _maps("download", "", good.downloads, bad.downloads, lambda d: d.sha256)
    out += _maps("apt", "", good.apt, bad.apt)
    for comp in sorted(set(good.build_apt) | set(bad.build_apt)):
        out += _maps("build-apt", f"{comp}/", good.build_apt.get(comp, {}), bad.build_apt.get(comp, {}))
    out += _maps("pip", "", {p.name: p for p in good.pip}, {p.name: p for p in bad.pip}, _pip_text)
    for comp in sorted(set(good.build_pip) | set(bad.build_pip)):
        out += _maps("build-pip", f"{comp}/", {p.name: p for p in good.build_pip.get(comp, ())},
                     {p.name: p for p in bad.build_pip.get(comp, ())}, _pip_text)
    return out


def _take(old: Mapping[str, Any], new: Mapping[str, Any], key: str) -> dict[str, Any]:
    out = dict(old)
    if key in new:
        out[key] = new[key]
    else:
        out.pop(key, None)
    return out


def _take_pip(old: Sequence[LockedPip], new: Sequence[LockedPip], name: str) -> tuple[LockedPip, ...]:
    """``old`` with package ``name`` as ``new`` has it: in its place, added at the end, or removed."""
    theirs = next((p for p in new if p.name == name), None)
    if theirs is None:
        return tuple(p for p in old if p.name != name)
    if any(p.name == name for p in old):
        return tuple(theirs if p.name == name else p for p in old)
    return (*old, theirs)


def apply(good: VariantLock, bad: VariantLock, changes: Sequence[PinChange]) -> VariantLock:
    """``good`` with the units of ``changes`` as ``bad`` has them (resolved_at: the bad lock's)."""
    v = good
    for ch in changes:
        comp, _, pkg = ch.name.partition("/")
        match ch.section:
            case "base":
                v = dataclasses.replace(v, base=bad.base)
            case "component":
                v = dataclasses.replace(v, components=_take(v.components, bad.components, ch.name))
            case "download":
                v = dataclasses.replace(v, downloads=_take(v.downloads, bad.downloads, ch.name))
            case "apt":
                v = dataclasses.replace(v, apt=_take(v.apt, bad.apt, ch.name))
            case "build-apt":
                inner = _take(v.build_apt.get(comp, {}), bad.build_apt.get(comp, {}), pkg)
                v = dataclasses.replace(v, build_apt=_drop_empty({**v.build_apt, comp: inner}))
            case "pip":
                v = dataclasses.replace(v, pip=_take_pip(v.pip, bad.pip, ch.name))
            case "build-pip":
                pips = _take_pip(v.build_pip.get(comp, ()), bad.build_pip.get(comp, ()), pkg)
                v = dataclasses.replace(v, build_pip=_drop_empty({**v.build_pip, comp: pips}))
    return dataclasses.replace(v, resolved_at=bad.resolved_at if changes else good.resolved_at)


def _drop_empty(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: x for k, x in data.items() if x}


# ------------------------------------------------------------------------------------------ bisection


class Bisection:
    """Binary search for the first bad of ``count`` ordered candidates: the state before candidate 0 is good and
    candidate count-1 is bad (both known). ``next()`` is the candidate to judge (None: done), ``record`` the verdict."""

    def __init__(self, count: int) -> None:
        if count < 1:
            raise ValueError("nothing to bisect: no candidate")
        self.good = -1  # the last candidate known good (-1: the state before the first)
        self.bad = count - 1  # the first candidate known bad
        self.steps: list[tuple[int, bool]] = []

    def next(self) -> int | None:
        if self.bad - self.good <= 1:
            return None
        return (self.good + self.bad) // 2

    def record(self, index: int, bad: bool) -> None:
        if not self.good < index < self.bad:
            raise ValueError(f"candidate {index} is outside the open range ({self.good}, {self.bad})")
        self.steps.append((index, bad))
        if bad:
            self.bad = index
        else:
            self.good = index

    @property
    def done(self) -> bool:
        return self.next() is None

    @property
    def culprit(self) -> int:
        if not self.done:
            raise ValueError("the bisection is not finished")
        return self.bad

    @staticmethod
    def most_steps(count: int) -> int:
        """The most verdicts a bisection of ``count`` candidates needs: ceil(log2 count)."""
        return math.ceil(math.log2(count)) if count > 1 else 0
