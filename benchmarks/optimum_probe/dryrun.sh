#!/bin/bash
# usage: dryrun.sh NAME pkgspec...   -- resolves the pinned stack + the given specs against venv1, reports changes
cd /work/optimum-lab
name=$1; shift
nice -n 15 venv1/bin/pip install --dry-run --report reports/$name.json torch==2.13.0 -r base-req.txt "$@" > reports/$name.log 2>&1
rc=$?
echo "== $name ($*) rc=$rc"
grep -v "is ignored" reports/$name.log | grep -E "ERROR|conflict|requires|Would install|cannot" | head -20
[ -s reports/$name.json ] && venv1/bin/python - reports/$name.json <<'PY'
import json,sys
r=json.load(open(sys.argv[1]))
print("  resolves:", ", ".join(f"{i['metadata']['name']}=={i['metadata']['version']}" for i in r["install"]))
PY
