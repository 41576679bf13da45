#!/bin/bash
# issue 57: the portable run beside the XNNPACK one (the machine is shared, load 8-15: CPU seconds are the comparison), then eager LoRA
cd /work/main
P=.venv/bin/python
L=benchmarks/results/logs
date -u; echo "== portable"
$P benchmarks/device_footprint.py --configs headline --only flux-layout-300m,sana-layout-250m --rows et_remat,native_remat --backend portable --out benchmarks/results/device_footprint_headline_portable > $L/device_footprint_headline_portable.log 2>&1 &
PP=$!
while kill -0 23709 2>/dev/null; do sleep 10; done
date -u; echo "== eager lora"
$P benchmarks/memory_speed.py --configs headline --variants lora --out benchmarks/results/memory_speed_headline_lora > $L/memory_speed_headline_lora.log 2>&1
wait $PP
date -u; echo done
