#!/usr/bin/env bash
# Lock the git sections of the seed stacks against mirrors of their upstream repositories.
#
#   scripts/check-upstream.sh MIRRORS_DIR [--write]
#
# MIRRORS_DIR holds bare mirrors laid out as MIRRORS_DIR/<owner>/<name>.git (github.com/<owner>/<name>),
# e.g. made with `git clone --mirror` (PR heads included: refs/pull/*/head). A throwaway configuration
# points buildctl's git_mirrors at them; `buildctl lock STACK --all --partial --only git` then runs on a
# copy of the project's pins/ (every variant of deepseek-v3-gb200, megatron-bert, verl-vllm), and the
# script prints each component's base commit, the changes applied (for a PR: the exact commits), what
# they drag in, the submodule gitlinks and the resulting tree. Nothing is fetched from anywhere else:
# base images, downloads and packages are recorded as "not asked".
#
# --write copies the resulting partial locks into pins/ (SHAs and trees only; commit them). Without it
# pins/ is left as it is. Exit status: buildctl's (4 lock error, 6 unreachable, 7 source: a change that
# does not apply, with what it collides with) for the first stack that fails.
# BUILDCTL_CHECK_CACHE=DIR keeps the git cache between runs (default: a temporary folder).
set -euo pipefail

usage() { echo "usage: $0 MIRRORS_DIR [--write]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
write=0
if [ $# -eq 2 ]; then [ "$2" = "--write" ] || usage; write=1; fi
[ -d "$1" ] || { echo "$0: $1 is not a folder" >&2; exit 2; }
mirrors=$(cd "$1" && pwd -P)
here=$(cd "$(dirname "$0")/.." && pwd -P)
stacks=(deepseek-v3-gb200 megatron-bert verl-vllm)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/check-upstream.XXXXXX")
trap 'rm -rf -- "$tmp"' EXIT
mkdir -p "$tmp/project"
cp -R -- "$here/pins" "$tmp/project/pins"
ln -s -- "$here/images" "$tmp/project/images"
# A TOML basic string: the folder name goes in with its backslashes and quotes escaped.
esc=$(printf '%s' "$mirrors" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g')
printf 'git_mirrors = { "https://github.com/" = "file://%s/" }\nnetwork_timeout = 30\n' "$esc" >"$tmp/config.toml"
export BUILDCTL_CONFIG="$tmp/config.toml"
export BUILDCTL_CACHE="${BUILDCTL_CHECK_CACHE:-$tmp/cache}"
unset BUILDCTL_GIT_MIRRORS BUILDCTL_DOWNLOAD_MIRRORS

echo "check-upstream: $(date -u +%Y-%m-%dT%H:%M:%SZ), mirrors $mirrors"
for repo in "$mirrors"/*/*.git; do
  [ -e "$repo" ] || continue
  printf '  mirror %s\n' "${repo#"$mirrors"/}"
done

for stack in "${stacks[@]}"; do
  echo
  echo "== $stack"
  rc=0
  PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" python3 -m buildctl --project "$tmp/project" \
    lock "$stack" --all --partial --only git --json >"$tmp/$stack.json" || rc=$?
  PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" python3 - "$tmp/$stack.json" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
if not data.get("ok"):
    e = data["error"]
    print(f"  FAILED ({e['type']}, exit {e['exit_code']}): {e['what']}")
    for k in ("why", "fix"):
        if e.get(k):
            print(f"    {k}: {e[k]}")
    sys.exit(0)
for note in data.get("notes", []):
    print(f"  note: {note}")
for name, v in data["variants"].items():
    comps = v.get("components", {})
    print(f"  variant {name}: {len(comps)} git component(s); not locked here: {', '.join(sorted(v.get('missing', {})))}")
    for cname, c in comps.items():
        print(f"    {cname}  {c['repo']}")
        print(f"      base {c['base']}" + (f"  (branch head {c['branch_head']})" if c.get("branch_head") else ""))
        for ch in c["changes"]:
            if ch["kind"] == "commit":
                print(f"      cherry-pick {ch['sha']}")
            elif ch["kind"] == "patch":
                print(f"      patch {ch['file']} sha256 {ch['sha256']}")
            else:
                extra = f", {len(ch['skipped_merges'])} merge(s) of {ch['target']} skipped" if ch["skipped_merges"] else ""
                mu = ch.get("merged_upstream")
                if mu:
                    extra += f", merged upstream ({mu['how']} {mu.get('commit', '')})".rstrip()
                if ch["empty"]:
                    extra += f", {len(ch['empty'])} pick(s) changed nothing"
                print(f"      PR #{ch['number']} head {ch['head']} ({ch['mode']}: {len(ch['commits'])} commit(s){extra})")
                for sha in ch["commits"]:
                    print(f"        {sha}")
        for d in c.get("dragged", []):
            print(f"      dragged in by {d['by']}: {d['sha']} {d['subject']}")
        for path, sha in sorted(c.get("submodules", {}).items()):
            print(f"      submodule {path} {sha}")
        print(f"      tree {c['tree']}")
PY
  [ "$rc" -eq 0 ] || exit "$rc"
  if [ "$write" -eq 1 ]; then
    cp -- "$tmp/project/pins/$stack.lock.json" "$here/pins/$stack.lock.json"
    echo "  wrote pins/$stack.lock.json"
  fi
done
