#!/bin/bash
# issue 57 items 3-5: the headline measurements, one after another (same hour), 1 thread each
cd /work/main
P=.venv/bin/python
L=benchmarks/results/logs
date -u; echo "== xnnpack (int8 scale on output)"
$P benchmarks/device_footprint.py --configs headline --only flux-layout-300m,sana-layout-250m --rows et_remat,native_remat --backend xnnpack --out benchmarks/results/device_footprint_headline_xnnpack > $L/device_footprint_headline_xnnpack.log 2>&1
date -u; echo "== eager lora"
$P benchmarks/memory_speed.py --configs headline --variants lora --out benchmarks/results/memory_speed_headline_lora > $L/memory_speed_headline_lora.log 2>&1
date -u; echo "== portable"
$P benchmarks/device_footprint.py --configs headline --only flux-layout-300m,sana-layout-250m --rows et_remat,native_remat --backend portable --out benchmarks/results/device_footprint_headline_portable > $L/device_footprint_headline_portable.log 2>&1
date -u; echo "== xnnpack, int8 dequantized (before issue 57 item 3)"
DITSKIP_INT8_SCALE_ON_OUTPUT=0 $P benchmarks/device_footprint.py --configs headline --only flux-layout-300m,sana-layout-250m --rows et_remat,native_remat --backend xnnpack --out benchmarks/results/device_footprint_headline_xnnpack_dequant > $L/device_footprint_headline_xnnpack_dequant.log 2>&1
date -u; echo done
