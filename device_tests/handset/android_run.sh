#!/usr/bin/env bash
# NOT RUN HERE: written for a real Android handset on USB (adb), never executed on the machine that wrote it.
#
# Push a bundle to the phone, train it in android_demo (ExecuTorch TrainingModule, AdamW in Kotlin), pull the
# memory figures. Two independent readouts: the app's own (device_run.json: VmRSS / VmHWM / native heap per step)
# and `dumpsys meminfo` sampled from the host every $SAMPLE_S seconds (TOTAL PSS, what Android's lmkd weighs).
#
#   device_tests/handset/android_run.sh BUNDLE_DIR [APK] [OUT_DIR]
#
# Needs: adb, a device with USB debugging, the app built (android_demo/README.md) or its APK given.
set -euo pipefail
BUNDLE=${1:?usage: android_run.sh BUNDLE_DIR [APK] [OUT_DIR]}
APK=${2:-}
OUT=${3:-handset_out/android-$(date +%Y%m%d-%H%M%S)}
PKG=org.ditskip.demo
SAMPLE_S=${SAMPLE_S:-1}
REMOTE=/sdcard/Android/data/$PKG/files/bundle        # the app's external files dir: no storage permission needed
RUN=$REMOTE/runs/android

mkdir -p "$OUT"
adb get-state >/dev/null
[ -n "$APK" ] && adb install -r "$APK"
adb shell getprop ro.product.model > "$OUT/device_model.txt"
adb shell cat /proc/meminfo | head -3 > "$OUT/device_meminfo.txt"

echo "pushing $BUNDLE -> $REMOTE"
adb shell rm -rf "$REMOTE"
adb shell mkdir -p "$REMOTE"
adb push "$BUNDLE/." "$REMOTE/" >/dev/null

adb shell am force-stop $PKG
adb shell am start -n $PKG/.MainActivity --es bundle "$REMOTE" --es run_dir "$RUN" --ez autostart true >/dev/null

echo "t_s,total_pss_kib,native_heap_pss_kib,vm_hwm_kib" > "$OUT/dumpsys_meminfo.csv"
t0=$(date +%s)
while ! adb shell test -f "$RUN/device_run.json"; do
  pid=$(adb shell pidof $PKG || true)
  if [ -z "$pid" ]; then echo "app process gone before device_run.json (killed by lmkd?)"; break; fi
  mi=$(adb shell dumpsys meminfo $PKG)
  total=$(echo "$mi" | awk '/TOTAL PSS:/ {print $3; exit} /^ *TOTAL/ {print $2; exit}')
  native=$(echo "$mi" | awk '/Native Heap/ {print $3; exit}')
  hwm=$(adb shell cat /proc/"$pid"/status | awk '/VmHWM/ {print $2}')
  echo "$(( $(date +%s) - t0 )),${total:-},${native:-},${hwm:-}" >> "$OUT/dumpsys_meminfo.csv"
  sleep "$SAMPLE_S"
done

adb pull "$RUN" "$OUT/run" >/dev/null || true
adb logcat -d -s ExecuTorch:* AndroidRuntime:E > "$OUT/logcat.txt" || true
python3 "$(dirname "$0")/summarize.py" "$OUT" "$BUNDLE"
