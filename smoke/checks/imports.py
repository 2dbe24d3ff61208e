"""imports: the modules the stack lists import (``module`` or ``module:Attribute``), each in its own process.

Build tier: with the CUDA driver stub standing in for libcuda.so.1 when the image has one and no
device is present; an import that needs a device is deferred to the GPU tier, and the report says so.
GPU tier: the same imports with the real driver.
"""

from __future__ import annotations

from typing import Any

from smoke.checks import Context, gpu_tier_repeats
from smoke.expect import Section, SectionError
from smoke.report import CheckResult, failed, passed, skipped

NAME = "imports"


def _run(ctx: Context, sec: Section) -> CheckResult:
    entries = sec.strs("modules")
    if not entries:
        raise SectionError("checks.imports.modules: list the modules to import (e.g. 'deep_ep:HybridEPBuffer')")
    rows: list[dict[str, Any]] = []
    for entry in entries:
        module, _, attr = entry.partition(":")
        res = ctx.probe("import", {"module": module, "attr": attr or None})
        row: dict[str, Any] = {"import": entry, "ok": res.ok, "probe": res.to_json()}
        if res.ok:
            row.update(file=res.data.get("file"), version=res.data.get("version"))
            if res.data.get("libcuda"):
                row["libcuda_loaded"] = res.data["libcuda"]
        else:
            row.update(error=res.error_text(), needs_device=res.needs_device(),
                       traceback=(res.error or {}).get("traceback", []))
        rows.append(row)
    bad = [r for r in rows if not r["ok"]]
    device_only = ctx.tier == "build" and not ctx.driver.device and bad and all(r["needs_device"] for r in bad)
    details = {"imports": rows, "driver": ctx.driver.to_json()}
    if device_only:
        return skipped(NAME, "needs a GPU device or a real CUDA driver, so it belongs to the GPU tier: "
                       + "; ".join(f"{r['import']}: {r['error']}" for r in bad), deferred="gpu", **details)
    if bad:
        return failed(NAME, "; ".join(f"{r['import']}: {r['error']}" for r in bad), **details)
    return passed(NAME, f"{len(rows)} import(s) succeeded: " + ", ".join(r["import"] for r in rows), **details)


build = _run
gpu = gpu_tier_repeats(NAME, _run)
