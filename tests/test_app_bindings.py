"""The demo apps' bindings of the native core (device_runtime/bindings/, android_demo's DitskipRuntime.kt, the Swift
package) call the C API (device_runtime/include/ditskip/ditskip.h) and nothing else.

Properties protected:
- the JNI library builds with the core (`make native`, CMake target ditskip_jni) and the Kotlin binding compiles with
  kotlinc; on a host JVM the binding trains a tiny bundle through the core, and its LoRA file is
  `ditskip-run train`'s byte for byte, its summary the same losses;
- a cancel from the progress callback (returning false, or DitskipSession.cancel() from another thread while the run
  waits in the callback) stops the run after that step with the CANCELLED status and a checkpoint of the steps
  done, from which the next train resumes to the uninterrupted run's LoRA; an exception thrown in the callback stops
  the run the same way and reaches the caller; a refused bundle reaches Kotlin as DitskipException with the CLI's
  status and one-line message;
- the Train button's path on a model bundle and the Generate button through the same binding: the subject stage on
  photos writes the subject bundle `ditskip-run personalize --no-train` writes (cache shards and index byte for
  byte), a stop from its listener returns CANCELLED and the next call continues to the same cache; generation with
  the trained LoRA writes `ditskip-run generate`'s picture (the same pixels);
- every `ditskip_*` name, params field and status the JNI, Kotlin and Swift sources use exists in ditskip.h; every
  Kotlin `external fun` has its JNI function and every JNI function its `external fun`; the Swift module map names the
  header.
kotlinc, a JDK (JNI headers) and the native build's tools are required: missing, the tests fail (.ci/run installs
them). The apps themselves (Android SDK / NDK, Xcode) cannot be built here; the Swift package is checked textually.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import PHOTOS, compile_tiny

ROOT = Path(__file__).resolve().parent.parent
HEADER = ROOT / "device_runtime/include/ditskip/ditskip.h"
JNI = ROOT / "device_runtime/bindings/android/ditskip_jni.cpp"
KOTLIN_BINDING = ROOT / "android_demo/app/src/main/java/org/ditskip/demo/DitskipRuntime.kt"
SWIFT_PACKAGE = ROOT / "device_runtime/bindings/swift"
LORA = "lora/pytorch_lora_weights.safetensors"
STEPS = 4

# A host program over the binding, as the app's Train button uses it. MODE: train | stop-at K (the callback returns
# false at step K) | cancel-at K (another thread calls cancel() at step K, joined inside the callback) | throw-at K.
DRIVER = """
import org.ditskip.demo.DitskipException
import org.ditskip.demo.DitskipSession
import org.ditskip.demo.DitskipStages
import org.ditskip.demo.GenerateOptions
import org.ditskip.demo.PersonalizeOptions
import org.ditskip.demo.TrainOptions
import java.io.File

// personalize MODEL PHOTOS OUT SUMMARY STOP_AT (the listener returns false at entry STOP_AT; -1 never)
// generate BUNDLE PROMPT OUT_PNG LORA|- SUMMARY
fun stages(args: Array<String>) {
    val personalize = args[0] == "personalize"
    val at = if (personalize) args[5].toInt() else -1
    val seen = ArrayList<String>()
    val st = DitskipStages()
    try {
        val result = if (personalize)
            st.personalize(args[1], args[2], PersonalizeOptions(outDir = args[3])) { _, done, total ->
                seen.add("$done/$total")
                done != at
            }
        else
            st.generate(args[1], args[2], args[3], GenerateOptions(seed = 7, lora = if (args[4] == "-") null else args[4])) { stage, done, total ->
                seen.add("$stage:$done/$total")
                true
            }
        File(if (personalize) args[4] else args[5]).writeText(result.summaryJson ?: "null")
        println("status " + result.status + " cancelled " + result.cancelled)
    } catch (e: DitskipException) {
        println("error " + e.status + " " + e.message)
    }
    println("progress " + seen.joinToString(","))
}

fun main(args: Array<String>) {
    if (args[0] == "personalize" || args[0] == "generate") return stages(args)
    val mode = args[2]
    val at = if (args.size > 3) args[3].toInt() else -1
    val seen = ArrayList<String>()
    try {
        val s = DitskipSession(args[0])
        try {                                      // (Debian's kotlinc 1.3 has no AutoCloseable.use)
            val result = s.train(TrainOptions(runDir = args[1], resume = true, checkpointEvery = 100)) { step, total, _ ->
                seen.add("$step/$total")
                if (step != at) true
                else if (mode == "stop-at") false
                else if (mode == "cancel-at") { val t = Thread { s.cancel() }; t.start(); t.join(); true }
                else if (mode == "throw-at") throw IllegalStateException("listener failed at step $step")
                else true
            }
            File(args[1], "binding_summary.json").writeText(result.summaryJson ?: "null")
            println("status " + result.status + " cancelled " + result.cancelled)
        } finally {
            s.close()
        }
    } catch (e: DitskipException) {
        println("error " + e.status + " " + e.message)
    } catch (e: IllegalStateException) {
        println("thrown " + e.message)
    }
    println("steps " + seen.joinToString(","))
}
"""


# ------------------------------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def jni_dir(runner) -> Path:
    lib = runner.binary.parent / "bindings" / "libditskip_jni.so"
    if not lib.is_file():
        pytest.fail(f"{lib} was not built: CMake found no JNI headers (a JDK; .ci/run installs default-jdk-headless)",
                    pytrace=False)
    return lib.parent


@pytest.fixture(scope="module")
def driver_jar(tmp_path_factory) -> Path:
    """DitskipRuntime.kt (the app's binding, unchanged) and the driver, compiled by kotlinc into one runnable jar."""
    if shutil.which("kotlinc") is None or shutil.which("java") is None:
        pytest.fail("kotlinc / java not found: the Kotlin binding is compiled and run here (.ci/run installs kotlin "
                    "and default-jdk-headless)", pytrace=False)
    d = tmp_path_factory.mktemp("kt")
    (d / "Driver.kt").write_text(DRIVER)
    jar = d / "driver.jar"
    r = subprocess.run(["kotlinc", "-nowarn", str(KOTLIN_BINDING), str(d / "Driver.kt"), "-include-runtime",
                        "-d", str(jar)], capture_output=True, text=True)
    assert r.returncode == 0 and jar.is_file(), f"kotlinc failed:\n{r.stderr[-3000:]}"
    return jar


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """flux-tiny with the ExecuTorch fp32 train_step (portable kernels, mapped weights), 4 steps."""
    from export.executorch_stage import ExecutorchPrograms
    return compile_tiny(tmp_path_factory.mktemp("bind") / "bundle", "flux-tiny", steps=STEPS,
                        programs=[ExecutorchPrograms(("fp32",), preprocess=False)])


@pytest.fixture(scope="module")
def cli_run(runner, bundle, tmp_path_factory) -> Path:
    """`ditskip-run train BUNDLE --json`: the reference the binding must equal."""
    from device_tests import native_runtime
    run_dir = tmp_path_factory.mktemp("cli") / "run"
    r = native_runtime.run(runner, "train", bundle, "--run-dir", run_dir, "--json", check=True)
    (run_dir / "cli_stdout.json").write_text(r.stdout)
    return run_dir


def kotlin(jar: Path, jni: Path, *args) -> dict[str, str]:
    """Runs the driver on the host JVM with the JNI library on java.library.path; its `key value` lines."""
    r = subprocess.run(["java", f"-Djava.library.path={jni}", "-cp", str(jar), "DriverKt", *map(str, args)],
                       capture_output=True, text=True, timeout=600, env={**os.environ, "DITSKIP_PROGRESS": "0"})
    assert r.returncode == 0, f"the JVM exited {r.returncode}:\n{r.stdout}\n{r.stderr[-3000:]}"
    return dict(line.split(" ", 1) for line in r.stdout.splitlines() if " " in line)


def checkpoint_step(run_dir: Path) -> int:
    from ditskip_edge.runtime.safetensors_io import read_safetensors
    _, meta = read_safetensors(run_dir / "checkpoint.safetensors")
    return int(meta["step"])


# ------------------------------------------------------------------------------------------------- on the JVM

def test_the_kotlin_binding_trains_the_bundle_to_ditskip_runs_lora_byte_for_byte(driver_jar, jni_dir, bundle, cli_run,
                                                                                   tmp_path):
    run_dir = tmp_path / "run"
    out = kotlin(driver_jar, jni_dir, bundle, run_dir, "train")
    assert out["status"] == "0 cancelled false"
    assert out["steps"] == ",".join(f"{i}/{STEPS}" for i in range(1, STEPS + 1))
    assert (run_dir / LORA).read_bytes() == (cli_run / LORA).read_bytes()
    summary = json.loads((run_dir / "binding_summary.json").read_text())
    cli = json.loads((cli_run / "cli_stdout.json").read_text())
    assert summary["losses"] == cli["losses"] and len(summary["losses"]) == STEPS
    assert Path(summary["lora"]).resolve() == (run_dir / LORA).resolve()


@pytest.mark.parametrize("mode", ["stop-at", "cancel-at", "throw-at"])
def test_a_cancel_from_the_progress_callback_stops_with_cancelled_and_a_checkpoint_that_resumes(
        driver_jar, jni_dir, bundle, cli_run, tmp_path, mode):
    run_dir = tmp_path / "run"
    out = kotlin(driver_jar, jni_dir, bundle, run_dir, mode, 2)
    assert out["steps"] == f"1/{STEPS},2/{STEPS}"                      # nothing after the cancelled step
    if mode == "throw-at":
        assert out["thrown"] == "listener failed at step 2"            # the listener's own exception, not a status
    else:
        assert out["status"] == "1 cancelled true"                     # DITSKIP_CANCELLED
    assert checkpoint_step(run_dir) == 2 and not (run_dir / LORA).exists()
    again = kotlin(driver_jar, jni_dir, bundle, run_dir, "train")
    assert again["status"] == "0 cancelled false" and again["steps"] == f"3/{STEPS},4/{STEPS}"
    assert (run_dir / LORA).read_bytes() == (cli_run / LORA).read_bytes()


def test_a_refused_bundle_reaches_kotlin_with_the_clis_status_and_line(driver_jar, jni_dir, runner, bundle, tmp_path):
    from device_tests import native_runtime
    damaged = tmp_path / "bundle"
    shutil.copytree(bundle, damaged, ignore=shutil.ignore_patterns("runs"))
    sched = damaged / "subject/schedule.json"
    sched.write_bytes(sched.read_bytes() + b" ")                        # no longer the manifest's SHA-256
    cli = native_runtime.run(runner, "train", damaged, "--run-dir", tmp_path / "cli")
    out = kotlin(driver_jar, jni_dir, damaged, tmp_path / "kt", "train")
    status, message = out["error"].split(" ", 1)
    assert int(status) == cli.returncode == 2
    assert "\n" not in message and message in cli.stderr and "schedule.json" in message


# ------------------------------------------------------------------------------------------------- the whole path

@pytest.fixture(scope="module")
def model_bundle(tmp_path_factory) -> Path:
    """flux-tiny model bundle (no photos): portable fp32 subject-stage programs with mapped weights, the fp32
    train_step, generation at fp32 with 2 sampler steps; int8 cache."""
    from export.executorch_stage import ExecutorchPrograms
    from export.executorch_subject import SubjectPrograms
    from export.generation_stage import GenerationPrograms
    return compile_tiny(tmp_path_factory.mktemp("bind-model") / "model", "flux-tiny", steps=STEPS, images=None,
                        cache_codec="int8-channel",
                        programs=[ExecutorchPrograms(("fp32",), preprocess=False), GenerationPrograms(("fp32",), steps=2)],
                        subject_programs=SubjectPrograms("fp32", backend="portable", external_weights=True))


@pytest.fixture(scope="module")
def cli_subject(runner, model_bundle, tmp_path_factory) -> Path:
    """`ditskip-run personalize MODEL --photos PHOTOS --no-train`, then `ditskip-run train` on it: the reference."""
    from device_tests import native_runtime
    out = tmp_path_factory.mktemp("cli-subject") / "subject"
    native_runtime.run(runner, "personalize", model_bundle, "--photos", PHOTOS, "--out", out, "--no-train", "--json",
                       check=True)
    native_runtime.run(runner, "train", out, "--run-dir", out / "runs/cli", "--json", check=True)
    return out


def cache_files(bundle: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((bundle / "subject/cache").iterdir())}


def test_the_kotlin_binding_runs_the_subject_stage_to_ditskip_runs_cache_byte_for_byte(driver_jar, jni_dir,
                                                                                     model_bundle, cli_subject,
                                                                                     tmp_path):
    out = kotlin(driver_jar, jni_dir, "personalize", model_bundle, PHOTOS, tmp_path / "subject",
                 tmp_path / "summary.json", -1)
    assert out["status"] == "0 cancelled false"
    summary = json.loads((tmp_path / "summary.json").read_text())
    n = summary["num_samples"]
    assert out["progress"].split(",")[-1] == f"{n}/{n}"
    assert cache_files(tmp_path / "subject") == cache_files(cli_subject)


def test_a_stop_from_the_stage_listener_returns_cancelled_and_the_next_call_continues_to_the_same_cache(
        driver_jar, jni_dir, model_bundle, cli_subject, tmp_path):
    args = ("personalize", model_bundle, PHOTOS, tmp_path / "subject", tmp_path / "summary.json")
    first = kotlin(driver_jar, jni_dir, *args, 2)
    assert first["status"] == "1 cancelled true"                           # DITSKIP_CANCELLED
    n = int(first["progress"].split(",")[0].split("/")[1])
    assert first["progress"] == f"1/{n},2/{n}" and not (tmp_path / "subject").exists()
    again = kotlin(driver_jar, jni_dir, *args, -1)
    assert again["status"] == "0 cancelled false"
    assert again["progress"].split(",")[0] == f"3/{n}"                      # the two entries done are not redone
    assert cache_files(tmp_path / "subject") == cache_files(cli_subject)


def test_the_kotlin_binding_generates_ditskip_runs_picture_with_the_trained_lora(driver_jar, jni_dir, runner,
                                                                                cli_subject, tmp_path):
    from PIL import Image

    from device_tests import native_runtime
    lora = cli_subject / "runs/cli/lora"
    native_runtime.run(runner, "generate", cli_subject, "--prompt", "a photo of sks toy", "--seed", 7, "--lora", lora,
                       "--out", tmp_path / "cli.png", check=True)
    out = kotlin(driver_jar, jni_dir, "generate", cli_subject, "a photo of sks toy", tmp_path / "kt.png", lora,
                 tmp_path / "summary.json")
    assert out["status"] == "0 cancelled false"
    summary = json.loads((tmp_path / "summary.json").read_text())
    n = summary["steps"]
    assert out["progress"].split(",") == [f"generate:{i}/{n}" for i in range(1, n + 1)] + ["decode:1/1"]
    with Image.open(tmp_path / "cli.png") as a, Image.open(tmp_path / "kt.png") as b:
        assert a.size == b.size and a.tobytes() == b.tobytes()


# ------------------------------------------------------------------------------------------------- textual

def header_names() -> tuple[set[str], set[str]]:
    """ditskip.h's declared names (functions, types, statuses) and the fields of its params structs."""
    text = HEADER.read_text()
    names = set(re.findall(r"\b(?:ditskip|DITSKIP)_\w+", text))
    fields: set[str] = set()
    for body in re.findall(r"typedef struct \{(.*?)\} ditskip_\w+_params;", text, re.S):
        fields |= set(re.findall(r"(\w+);", re.sub(r"/\*.*?\*/", "", body, flags=re.S)))
    return names, fields


def binding_sources() -> dict[Path, str]:
    paths = [JNI, *sorted((ROOT / "android_demo").rglob("*.kt")), *sorted(SWIFT_PACKAGE.rglob("*.swift")),
             *sorted((ROOT / "ios_demo").rglob("*.swift"))]
    return {p: p.read_text() for p in paths}


def test_every_ditskip_name_the_bindings_use_is_in_the_header():
    names, fields = header_names()
    cmake = (ROOT / "device_runtime/bindings/CMakeLists.txt").read_text()
    assert "add_library(ditskip_jni SHARED" in cmake
    for path, text in binding_sources().items():
        used = set(re.findall(r"\b(?:ditskip|DITSKIP)_\w+", text)) - {"ditskip_jni"}   # the JNI library's name
        assert used <= names, f"{path.relative_to(ROOT)} uses {sorted(used - names)}, not in ditskip.h"
    jni = JNI.read_text()
    swift = (SWIFT_PACKAGE / "Sources/Ditskip/Ditskip.swift").read_text()
    for lang, text, pattern in (("JNI", jni, r"\bp\.(\w+)\s*="), ("Swift", swift, r"\bparams\.(\w+)\s*=")):
        set_fields = set(re.findall(pattern, text))
        assert set_fields and set_fields <= fields, f"{lang} sets {sorted(set_fields - fields)}, not in the params"
    assert "ditskip_string_free" in jni and "ditskip_string_free" in swift      # returned strings are freed


def test_every_kotlin_external_fun_has_its_jni_function_and_back():
    kt = KOTLIN_BINDING.read_text()
    block = kt[kt.index("object DitskipNative"):kt.index("class TrainOptions")]
    externals = set(re.findall(r"external fun (\w+)\(", block))
    jni = set(re.findall(r"Java_org_ditskip_demo_DitskipNative_(\w+)\(", JNI.read_text()))
    assert externals and externals == jni, (sorted(externals - jni), sorted(jni - externals))
    assert 'System.loadLibrary("ditskip_jni")' in kt
    assert "org/ditskip/demo/DitskipException" in JNI.read_text() and "class DitskipException(val status: Int" in kt


def test_the_swift_module_map_names_the_core_header():
    modulemap = (SWIFT_PACKAGE / "Sources/CDitskip/module.modulemap").read_text()
    header = re.search(r'header "([^"]+)"', modulemap).group(1)
    assert (SWIFT_PACKAGE / "Sources/CDitskip" / header).resolve() == HEADER.resolve()
    assert 'link "ditskip"' in modulemap
    package = (SWIFT_PACKAGE / "Package.swift").read_text()
    assert '.systemLibrary(name: "CDitskip"' in package and '.target(name: "Ditskip", dependencies: ["CDitskip"]' in package
    assert "import Ditskip" in (ROOT / "ios_demo/DitSkipDemo/ContentView.swift").read_text()
    assert "path: ../device_runtime/bindings/swift" in (ROOT / "ios_demo/project.yml").read_text()
