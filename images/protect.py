"""Protected base packages: fail the python node's build when pip replaced one.

buildctl copies this file into the python node and runs it with the image's own Python (standard
library only: it runs in any base, Python 3.8 and later) before and after pip:

    protect.py snapshot PATTERN... > before.json     # versions of installed packages matching a pattern
    protect.py check before.json [--replace PATTERN...]

`check` exits 1 naming every protected package that pip removed or replaced, unless a --replace
pattern (the manifest's protect.replace) says the stack replaces it on purpose.
"""

import fnmatch
import json
import re
import sys
from importlib import metadata


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def installed(patterns):
    """Canonical name -> version of every installed distribution matching one of ``patterns``."""
    out = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        name = canonical(name)
        if name not in out and any(fnmatch.fnmatchcase(name, p) for p in patterns):
            out[name] = dist.version
    return out


def problems(before, after, replace):
    found = []
    for name, version in sorted(before.items()):
        if any(fnmatch.fnmatchcase(name, p) for p in replace):
            continue
        now = after.get(name)
        if now is None:
            found.append("%s %s was removed" % (name, version))
        elif now != version:
            found.append("%s %s was replaced by %s" % (name, version, now))
    return found


def main(argv):
    if argv[:1] == ["snapshot"]:
        patterns = [canonical(p) for p in argv[1:]]
        json.dump({"patterns": patterns, "packages": installed(patterns)}, sys.stdout, sort_keys=True)
        return 0
    if argv[:1] == ["check"] and len(argv) >= 2:
        with open(argv[1]) as f:
            snap = json.load(f)
        replace = [canonical(p) for p in argv[3:]] if argv[2:3] == ["--replace"] else []
        found = problems(snap["packages"], installed(snap["patterns"]), replace)
        for line in found:
            sys.stderr.write("protected package changed: %s\n" % line)
        if found:
            sys.stderr.write("pip replaced packages the base image ships and the manifest protects "
                             "(protect.packages). Pin a version the base already has, or name the package "
                             "in protect.replace if the stack replaces it on purpose.\n")
            return 1
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
