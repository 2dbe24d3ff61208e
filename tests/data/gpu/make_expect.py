# ruff: noqa  (kept exactly as it ran on the device)
"""Write the expectations for the H200 run (TE 2.10.0 release wheels from PyPI on the device's torch)."""
import json
import re
import sys

before = json.load(open(sys.argv[1]))
out = sys.argv[2]
canon = lambda n: re.sub(r"[-_.]+", "-", n).lower()  # noqa: E731
base = {canon(p["name"]): p["version"] for p in before
        if canon(p["name"]) in ("torch", "triton") or canon(p["name"]).startswith("nvidia-")}
checks = {
    "versions": {"components": [
        {"name": "transformer-engine", "dist": "transformer_engine", "module": "transformer_engine", "version": "2.10.0"},
        {"name": "transformer-engine-cu13", "dist": "transformer_engine_cu13", "version": "2.10.0"},
        {"name": "transformer-engine-torch", "dist": "transformer_engine_torch", "version": "2.10.0"},
    ]},
    "cudnn": {"version": "9.14", "package": "libcudnn9-cuda-13"},
    "protected": {"patterns": ["torch", "triton", "nvidia-*"], "base": base},
    "imports": {"modules": ["transformer_engine.pytorch:Linear", "transformer_engine.pytorch:DotProductAttention"]},
    "mxfp8": {},
    "attention": {"backend": "auto", "source": "--attention-backend auto (Megatron's default)"},
    "arch": {"archs": ["9.0"], "modules": ["transformer_engine"]},
}
common = {"schema": 1, "stack": "h200-device", "variant": "te-2.10.0-pypi",
          "comment": "H200 device run: transformer-engine(-cu13) 2.10.0 from PyPI, transformer-engine-torch 2.10.0 built from sdist",
          "required": list(checks), "probe_timeout_s": 240, "checks": checks}
json.dump(common, open(f"{out}/gpu.json", "w"), indent=1)
json.dump({**common, "driver_stub": "auto"}, open(f"{out}/build.json", "w"), indent=1)
json.dump({**common, "driver_stub": "always",
           "comment": common["comment"] + "; build tier with the CUDA driver stub forced in place of libcuda.so.1"},
          open(f"{out}/build-stub.json", "w"), indent=1)
json.dump({n: json.load(open(f"{out}/{n}.json")) for n in ("gpu", "build", "build-stub")},
          open(sys.argv[3], "w"), indent=1)
print("protected base:", base)
