#!/bin/bash
# Device call (nvidia-h200), after h200-hopper/compile.sh (same machine, still warm: its compiles run on in
# /tmp/b17 under setsid): the baked launch scripts run real training steps of the 1-GPU proxy profiles.
# - python node: the carried runtime wheels (pip install --no-index --no-deps), nvidia-mathdx removed;
# - assemble node: the two compiled wheels with the rendered assemble pip line (--require-hashes),
#   Megatron-LM's export at /opt/megatron-lm (deepseek-v3-gb200) and /workspace/megatron-lm
#   (megatron-bert), the stack's ENV (image-env-<stack>.sh);
# - the bindpcie download at /usr/local/bin/bindpcie (numactl from carried .debs if the machine lacks it);
# - BERT data from make_bert_data.py; then each proxy profile through buildctl-launch-<stack>, unchanged,
#   BUILDCTL_PROFILE=<profile>, under `timeout`, its whole log in $OUT/train-<profile>.log and its report
#   (report.py: smoke.trainlog's reader, as the train check reads it) merged into $OUT/reports.json.
# Run as: bash tests/data/gpu/h200-train/train.sh   (from the repository root on the device)
# It needs the buildctl checkout there: the device tool runs the command in a copy of the session's checkout,
# and the trainings run as `python3 -m smoke` from that root (TRAIN_VIA=smoke, SMOKE_TRAIN=1) with this
# folder's make_bert_data.py and report.py; it stops at once when the root holds no smoke/ suite.
# TRAIN_CARRY: the folder prepare_train.py, fetch_wheels.sh and the README's commands filled (launch scripts,
# image-env-<stack>.sh, expect-<stack>.json, profiles.txt, bindpcie, whl/, deb/, megatron-lm.tar.gz);
# default .devcarry/train under the root, the ignored folder named in the call's `carry`. Set it when the
# carry travels under another name (e.g. TRAIN_CARRY=$PWD/.devcarry/train2).
# Knobs: PROFILES='stack:profile ...' (default: profiles.txt), TRAIN_TIMEOUT_S (240), WAIT_S (for the
# compiles, 240), TRAIN_VIA=smoke (default: each training runs as the smoke suite's train check, GPU tier, with
# $T/expect-<stack>.json from prepare_train.py; TRAIN_VIA=direct runs the script itself), SMOKE_TRAIN=1 (direct
# mode: also the smoke suite's GPU tier with $T/expect-<stack>.json, train check included).
set -u
export PYTHONUNBUFFERED=1
ROOT=$PWD
HERE=$(cd "$(dirname "$0")" && pwd)
T=${TRAIN_CARRY:-$ROOT/.devcarry/train}
if [ ! -f "$ROOT/smoke/__main__.py" ]; then
  echo "train.sh: $ROOT is not a buildctl checkout (no smoke/__main__.py): run it from the checkout's root"; exit 1
fi
if [ ! -f "$T/profiles.txt" ] && [ -z "${PROFILES:-}" ]; then
  echo "train.sh: TRAIN_CARRY=$T holds no profiles.txt (prepare_train.py writes it) and PROFILES is unset"; exit 1
fi
W=/tmp/b17                   # compile.sh's work folder
R=/tmp/h5train               # this script's
rm -rf "$R/bin" "$R/standin" "$R"/report-*.json; mkdir -p "$R/bin" "$OUT"
exec > >(tee "$OUT/train.log") 2>&1
date -u +%FT%TZ
t_call=$(date +%s)
facts="$R/facts.txt"; : > "$facts"
fact() { echo "$1=$2" >> "$facts"; echo "fact: $1=$2"; }

echo "== compiled wheels (h200-hopper/compile.sh)"
t0=$(date +%s)
if [ ! -d "$W" ]; then
  echo "no $W: run tests/data/gpu/h200-hopper/compile.sh first on this machine (same warm machine)"; exit 3
fi
while [ "$(ls "$W"/*.rc 2>/dev/null | wc -l)" -lt 2 ] && [ $(( $(date +%s) - t0 )) -lt "${WAIT_S:-240}" ]; do sleep 10; done
for c in transformer-engine deepep-hybridep; do
  echo "$c rc/seconds: $(cat "$W/$c.rc" 2>/dev/null || echo 'still running')"
  [ "$(cut -d' ' -f1 "$W/$c.rc" 2>/dev/null)" = 0 ] || { echo "compile of $c not done or failed:"; tail -n 20 "$W/$c.log"; exit 3; }
done

echo "== install (python node's wheels, assemble's pip line)"
python3 -m pip uninstall -y -q nvidia-mathdx 2>/dev/null
ls "$T"/whl/*.whl > /dev/null || { echo "no runtime wheels in $T/whl (fetch_wheels.sh)"; exit 1; }
PIP_BREAK_SYSTEM_PACKAGES=1 PIP_CONSTRAINT= python3 -m pip install -q --no-index --find-links "$T/whl" --only-binary=:all: \
  --no-deps --no-cache-dir --no-compile "$T"/whl/*.whl || exit 1
: > "$R/assemble-requirements.txt"
for c in transformer-engine deepep-hybridep; do
  w=$(ls "$W/out-$c"/*.whl); n=$(basename "$w"); name=${n%%-*}; ver=$(echo "$n" | cut -d- -f2)
  echo "$name==$ver --hash=sha256:$(sha256sum "$w" | cut -d' ' -f1)" >> "$R/assemble-requirements.txt"
  fact "wheel.$c" "$n"
done
PIP_BREAK_SYSTEM_PACKAGES=1 PIP_CONSTRAINT= python3 -m pip install -q --no-index --find-links "$W/out-transformer-engine/" \
  --find-links "$W/out-deepep-hybridep/" --only-binary=:all: --no-deps --no-cache-dir --no-compile --require-hashes \
  -r "$R/assemble-requirements.txt" || exit 1
python3 -c "import transformer_engine, transformer_engine.pytorch, deep_ep, pydantic; print('imports: TE', transformer_engine.__version__, 'pydantic', pydantic.VERSION)" \
  || { echo "TE/DeepEP import failed after install"; exit 1; }

echo "== Megatron-LM export at the workdirs"
MEG=""
for f in "$T/megatron-lm.tar.gz" "$ROOT/.devcarry/c2/megatron-lm.tar.gz"; do [ -f "$f" ] && { MEG=$f; break; }; done
[ -n "$MEG" ] || { echo "no megatron-lm.tar.gz in $T or .devcarry/c2 (h200-hopper/prepare.py packs it)"; exit 1; }
# python3-config gives helpers_cpp its suffix (megatron/core/datasets/Makefile); a venv may lack it
if ! command -v python3-config > /dev/null; then
  mkdir -p "$R/bin"
  printf '#!/bin/sh\n[ "$1" = --extension-suffix ] && exec python3 -c "import sysconfig; print(sysconfig.get_config_var(\\"EXT_SUFFIX\\"))"\necho "python3-config stand-in: only --extension-suffix" >&2; exit 1\n' > "$R/bin/python3-config"
  chmod +x "$R/bin/python3-config"; export PATH="$R/bin:$PATH"; fact python3_config stand-in
fi
for d in /opt/megatron-lm /workspace/megatron-lm; do
  rm -rf "$d"; mkdir -p "$d" && tar xzf "$MEG" -C "$d" || exit 1
  # Megatron compiles this at start (megatron/training/initialize.py:176-190); once here, to see it fail early
  make -s -C "$d/megatron/core/datasets" > "$R/helpers-$(basename "$(dirname "$d")").log" 2>&1 \
    || { echo "helpers_cpp build failed in $d:"; cat "$R/helpers-$(basename "$(dirname "$d")").log"; exit 1; }
  echo "$d: .git/HEAD $(cat "$d/.git/HEAD" 2>/dev/null || echo '?'); $(ls "$d"/megatron/core/datasets/helpers_cpp*)"
done
fact megatron_export "$(basename "$MEG") $(sha256sum "$MEG" | cut -c1-16)"

echo "== python, bindpcie, numactl"
# pretrain_gpt.py runs as `bindpcie python pretrain_gpt.py`: `python` must be the interpreter with torch
if ! python -c 'import torch' > /dev/null 2>&1; then
  mkdir -p "$R/bin"; ln -sf "$(command -v python3)" "$R/bin/python"; export PATH="$R/bin:$PATH"
  fact python "link to $(command -v python3) (no python with torch on PATH)"
fi
install -m 0755 "$T/bindpcie" /usr/local/bin/bindpcie || exit 1
fact bindpcie_sha256 "$(sha256sum /usr/local/bin/bindpcie | cut -d' ' -f1)"
command -v lscpu nvidia-smi || echo "lscpu or nvidia-smi missing: bindpcie will fail"
if ! command -v numactl > /dev/null; then
  echo "numactl missing: unpacking the carried .debs (Debian 12 builds, need glibc >= 2.34; here $(ldd --version | head -1))"
  N=/opt/buildctl-numactl; rm -rf "$N"; mkdir -p "$N"
  for f in "$T"/deb/*.deb; do dpkg -x "$f" "$N" || echo "dpkg -x $f failed"; done
  export PATH="$N/usr/bin:$PATH" LD_LIBRARY_PATH="$N/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fact numactl "carried $(ls "$T"/deb/ 2>/dev/null | tr '\n' ' ')"
else
  fact numactl "machine's $(command -v numactl)"
fi
numactl --hardware 2>&1 | head -3
if LOCAL_RANK=0 bindpcie true > "$R/bindpcie.out" 2>&1; then
  fact bindpcie "real ($(tr '\n' ' ' < "$R/bindpcie.out"))"
else
  # The launch scripts stay as buildctl rendered them; only the program named bindpcie changes, and the
  # reports say so. The cause (no NUMA in the VM, numactl missing or not loadable) is printed here.
  echo "bindpcie FAILED on this machine, so the trainings run under a stand-in that binds nothing:"; cat "$R/bindpcie.out"
  mkdir -p "$R/standin"
  printf '#!/bin/sh\necho "bindpcie stand-in (the real one failed on this machine; see train.log): exec $*" >&2\nexec "$@"\n' > "$R/standin/bindpcie"
  chmod +x "$R/standin/bindpcie"; export PATH="$R/standin:$PATH"
  fact bindpcie "STAND-IN: real one failed: $(tr '\n' ' ' < "$R/bindpcie.out" | cut -c1-300)"
fi

echo "== BERT data (make_bert_data.py)"
D=$R/data; mkdir -p "$D"
PYTHONPATH=/workspace/megatron-lm python3 "$HERE/make_bert_data.py" "$D/bert/my-bert_text_sentence" \
  --vocab "$D/bert/bert-vocab.txt" > "$R/bert-data.json" || { echo "make_bert_data.py failed"; exit 1; }
cat "$R/bert-data.json"

launch_one() {  # uses stack, profile, launch, envf, MODE, EXTRA
  (
    set -a; . "$envf"; set +a     # the image's ENV
    # multicast off, as the device asks (KINDS.md), even where the stack's env does not say it
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    export BUILDCTL_PROFILE="$profile"
    # site paths (the manifests' entrypoint.paths)
    export CHECKPOINT_PATH="$R/ckpt-$stack" TENSORBOARD_DIR="$R/tb-$stack" TENSORBOARD_LOGS_PATH="$R/tb-$stack"
    export DATA_CACHE_PATH="$R/cache-$stack"
    if [ "$stack" = megatron-bert ]; then
      export DATA_PATH="$D/bert/my-bert_text_sentence" VOCAB_FILE="$D/bert/bert-vocab.txt" MASTER_ADDR=127.0.0.1
    else
      # one srun task: the rank variables the script reads (or takes from SLURM_*)
      export RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500
    fi
    echo "launch: $launch ($(sha256sum "$launch" | cut -c1-16)), BUILDCTL_PROFILE=$profile"
    bash "$launch" --print-command | tee "$R/command-$profile.txt"
    # known ways for these launches to stop before step 1 on this machine, said before they happen
    c=" $(cat "$R/command-$profile.txt") "
    if [[ $c =~ " --wandb-project "([^ ]+) ]] && [[ ${BASH_REMATCH[1]} != "''" ]] && ! python3 -c 'import wandb' 2>/dev/null; then
      echo "PREFLIGHT: --wandb-project ${BASH_REMATCH[1]} without wandb: rank world_size-1 does 'import wandb' (megatron/training/global_vars.py:189-193 @ effebd81) and stops"
    fi
    if [ "$stack" = megatron-bert ] && [[ $c != *" --legacy-tokenizer "* ]]; then
      echo "PREFLIGHT: no --legacy-tokenizer: pretrain_bert.py:149-152 builds the dataset tokenizer with AutoTokenizer.from_pretrained('bert-large-uncased', vocab_file=...) (megatron/core/tokenizers/text/libraries/megatron_hf_tokenizer.py), which needs the Hugging Face hub: offline it fails"
    fi
    cd /
    if [ "$MODE" = smoke ]; then
      # the run IS the smoke suite's train check: the image's script at its baked path, the GPU tier, the
      # expectation buildctl wrote for the stack (train alone); the check's report and Megatron's log come back
      install -m 0755 "$launch" /usr/local/bin/buildctl-launch
      mkdir -p /tmp/h5train/logs; rm -f "/tmp/h5train/logs/train-$profile.log"
      cd "$ROOT"   # python3 -m smoke: the suite from this checkout (the launch script cds to its workdir itself)
      timeout -k 15 "${TRAIN_TIMEOUT_S:-420}" python3 -m smoke --expect "$T/expect-$stack.json" --tier gpu \
        > "$OUT/smoke-$profile.json"
      src=$?
      echo "smoke --tier gpu (train check) exit status $src"
      cat "/tmp/h5train/logs/train-$profile.log" 2>/dev/null
      exit $src
    fi
    # shellcheck disable=SC2086  # EXTRA: words appended to the launch (the script passes "$@" on)
    exec timeout -k 15 "${TRAIN_TIMEOUT_S:-240}" bash "$launch" $EXTRA
  )
}

echo "== trainings"
PROFILES=${PROFILES:-$(awk '{printf "%s:%s ", $1, $2}' "$T/profiles.txt" 2>/dev/null)}
[ -n "${PROFILES// /}" ] || { echo "no profiles (PROFILES or $T/profiles.txt)"; exit 1; }
overall=0
for sp in $PROFILES; do
  stack=${sp%%:*}; profile=${sp#*:}
  launch="$T/buildctl-launch-$stack"; envf="$T/image-env-$stack.sh"
  log="$OUT/train-$profile.log"
  echo "-- $stack / $profile ($(date -u +%T))"
  rm -rf "$R/ckpt-$stack" "$R/tb-$stack" "$R/cache-$stack"
  s=$(date +%s.%N)
  MODE=${TRAIN_VIA:-smoke} EXTRA=""
  launch_one > "$log" 2>&1
  rc=$?
  secs=$(python3 -c "import time; print(round(time.time() - $s, 1))")
  echo "$profile: rc $rc in $secs s"
  fact "rc.$profile" "$rc"; fact "seconds.$profile" "$secs"
  python3 "$HERE/report.py" "$log" --profile "$profile" --rc "$rc" --seconds "$secs" \
    > "$R/report-$profile.json"; ok=$?
  python3 -c "import json, sys; r = json.load(open(sys.argv[1])); print('  ok=%s: %s' % (r['ok'], r['summary']))" \
    "$R/report-$profile.json"
  [ "$ok" = 0 ] || { overall=1; echo "  last lines of $log:"; tail -n 25 "$log"; }
  # A diagnosis in the same call (the machine keeps the compiled wheels only while it stays warm): when the
  # profile failed and RETRY_<profile with _ for -> holds words, the script runs again (direct) with them
  # appended; its log and report say which words. It is not the profile: the profile as declared failed.
  retry_var="RETRY_${profile//-/_}"
  if [ "$ok" != 0 ] && [ -n "${!retry_var-}" ]; then
    MODE=direct EXTRA=${!retry_var}
    echo "-- $profile again, direct, with appended: $EXTRA ($(date -u +%T))"; s=$(date +%s.%N)
    launch_one > "$OUT/train-$profile-retry.log" 2>&1; rrc=$?
    rsecs=$(python3 -c "import time; print(round(time.time() - $s, 1))")
    fact "retry.$profile" "rc $rrc in $rsecs s with appended: $EXTRA"
    python3 "$HERE/report.py" "$OUT/train-$profile-retry.log" --profile "$profile" --rc "$rrc" \
      --seconds "$rsecs" > "$R/report-$profile-retry.json"
    tail -n 5 "$OUT/train-$profile-retry.log"
  fi
done
python3 - "$R" "$OUT/reports.json" <<'PY'
import glob, json, os, sys
out = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "report-*.json"))):
    try:
        out[os.path.basename(f)[len("report-"):-len(".json")]] = json.load(open(f))
    except Exception as exc:  # noqa: BLE001
        out[os.path.basename(f)] = f"unreadable: {exc}"
json.dump(out, open(sys.argv[2], "w"), indent=1, sort_keys=True)
PY

if [ "${SMOKE_TRAIN:-0}" = 1 ]; then
  # smoke's train check (smoke/checks/train.py) runs /usr/local/bin/buildctl-launch of the image; here the
  # rendered script of the first profile's stack goes there, and the expectation comes from the host
  # (smoke.expect_for of that stack, as h200-hopper/prepare.py writes it) as $T/expect-<stack>.json.
  stack=${PROFILES%%:*}; stack=${stack# }
  if [ -f "$ROOT/smoke/checks/train.py" ] && [ -f "$T/expect-$stack.json" ]; then
    echo "== smoke --tier gpu (expect-$stack.json)"
    install -m 0755 "$T/buildctl-launch-$stack" /usr/local/bin/buildctl-launch
    ( set -a; . "$T/image-env-$stack.sh"; set +a
      export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
      export CHECKPOINT_PATH="$R/ckpt-$stack" TENSORBOARD_DIR="$R/tb-$stack" TENSORBOARD_LOGS_PATH="$R/tb-$stack"
      export DATA_CACHE_PATH="$R/cache-$stack" DATA_PATH="$D/bert/my-bert_text_sentence" VOCAB_FILE="$D/bert/bert-vocab.txt"
      timeout "${SMOKE_TIMEOUT_S:-300}" python3 -m smoke --expect "$T/expect-$stack.json" --tier gpu ) \
      > "$OUT/report-smoke-$stack.json"
    echo "smoke exit status $?"
  else
    echo "== smoke train: smoke/checks/train.py or $T/expect-$stack.json missing, skipped"
  fi
fi

python3 - "$facts" "$R/bert-data.json" "$OUT/facts.json" <<'PY'
import json, sys
facts = dict(line.rstrip("\n").split("=", 1) for line in open(sys.argv[1]) if "=" in line)
try:
    text = open(sys.argv[2]).read()  # TE prints a deprecation line to stdout on import, before the JSON
    facts["bert_data"] = json.loads(text[text.index("{"):])
except Exception as exc:  # noqa: BLE001
    facts["bert_data"] = f"unreadable: {exc}"
json.dump(facts, open(sys.argv[3], "w"), indent=1, sort_keys=True)
PY
echo "call: $(( $(date +%s) - t_call )) s, overall $overall"
exit $overall
