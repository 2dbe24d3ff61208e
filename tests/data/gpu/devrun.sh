#!/bin/bash
# H200 run of the smoke suite against real Transformer Engine 2.10 (see GPU-CHECKS.md). It ran on the
# device as `cp -r .devcarry/p3/* /tmp/te/ && bash /tmp/te/devrun.sh` after two calls that had put the
# wheel's first two parts (split -b 58M) into /tmp/te; p3 held the last part, the small wheels
# (transformer_engine 2.10.0, pydantic, pydantic-core, annotated-types, typing-inspection,
# typing-extensions, einops), the transformer-engine-torch 2.10.0 sdist tree, this script,
# make_expect.py and a copy of smoke/.
set -u
export PYTHONUNBUFFERED=1
T=/tmp/te
exec > >(tee "$OUT/log.txt") 2>&1
cd "$T" || exit 1
W=whl/transformer_engine_cu13-2.10.0-py3-none-manylinux_2_28_x86_64.whl
cat part.00 part.01 part.02 > "$W" && sha256sum -c cu13.sha256 || { echo "wheel parts do not join"; exit 1; }
echo "== device"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv
command -v python3; python3 -V; echo "CUDA_HOME=${CUDA_HOME-unset}"; ls -la /usr/local/cuda/lib64/stubs/libcuda.so /dev/nvidiactl
command -v cuobjdump nvcc
python3 -m pip list --format=json > "$OUT/pip-before.json"
python3 -m pip list 2>/dev/null | grep -iE "^(torch|triton|nvidia-cudnn|transformer|pydantic|einops|typing)"
echo "== install"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir whl/*.whl || exit 1
rm -rf src && mkdir src && tar xzf te-torch-2.10.0-src.tar.gz -C src
t0=$(date +%s)
(cd src/te-torch-src && NVTE_PYTORCH_FORCE_BUILD=TRUE MAX_JOBS=16 NVTE_CUDA_ARCHS=90 NVTE_FRAMEWORK=pytorch \
  python3 -m pip install --no-build-isolation --no-deps --no-index . > "$T/build.log" 2>&1) \
  || { echo "transformer-engine-torch build failed"; tail -40 "$T/build.log"; exit 1; }
echo "transformer-engine-torch built in $(( $(date +%s) - t0 )) s"
python3 -m pip list 2>/dev/null | grep -iE "^(transformer|nvidia-cudnn)"
python3 make_expect.py "$OUT/pip-before.json" "$T" "$OUT/expects.json"
echo "== smoke gpu tier"
timeout 300 python3 -m smoke --expect gpu.json --tier gpu --junit "$OUT/report-gpu.xml" > "$OUT/report-gpu.json"; echo "gpu tier exit status $?"
echo "== smoke build tier"
timeout 200 python3 -m smoke --expect build.json --tier build > "$OUT/report-build.json"; echo "build tier exit status $?"
echo "== smoke build tier, driver stub forced"
timeout 200 python3 -m smoke --expect build-stub.json --tier build > "$OUT/report-build-stub.json"; echo "build tier (stub) exit status $?"
echo "== te.Linear under autocast(recipe=...) through the probe, per recipe"
for r in Float8CurrentScaling MXFP8BlockScaling; do
  timeout 120 python3 -c "import json,sys; from smoke import probes; print(json.dumps({'recipe': sys.argv[1], 'result': probes.run('mxfp8_linear', {'recipe': sys.argv[1]})}, default=str))" "$r" >> "$OUT/linear-probe.jsonl"
done
cat "$OUT/linear-probe.jsonl" | cut -c1-600
python3 - <<'PY'
import json, os
for name in ("report-gpu", "report-build", "report-build-stub"):
    r = json.load(open(os.path.join(os.environ["OUT"], name + ".json")))
    print(f"{name}: ok={r['ok']} failed={r['failed']}")
    for c in r["checks"]:
        print(f"  {c['name']:14} {c['status']:11} {c['summary'][:300]}")
PY
