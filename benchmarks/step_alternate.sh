#!/usr/bin/env bash
# Paired timing of exported training programs on a shared machine: each program run by the native core in turn,
# ROUNDS times (ditskip-run step --steps 3 --threads 1; prints the median step's CPU seconds per round), so load
# drifts hit every program alike.
#   benchmarks/step_alternate.sh ROUNDS DIR VARIANT...    (DIR/<config>_<variant>/ as step_profile.py --keep-programs)
set -euo pipefail
rounds=$1 dir=$2; shift 2
for r in $(seq "$rounds"); do
  for v in "$@"; do
    d=$dir/$v
    c=$(build/native/ditskip-run step "$d/train_step.pte" --data "$d/train_step.ptd" --inputs "$d/inputs_native" \
        --steps 3 --threads 1 --json 2>/dev/null \
        | python3 -c "import json,sys; print(sorted(json.load(sys.stdin)['step_cpu_seconds'])[1])")
    echo "$r $v $c"
  done
done
