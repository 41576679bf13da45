"""The native core's generation (`ditskip-run generate`, device_runtime/src/run/generator.cpp) is the Python runtime's
(`python -m ditskip_edge.runtime generate`, ditskip_edge/runtime/generation.py).

Properties protected:
- x86-64: the picture equals the Python runtime's for the same bundle, prompt, seed, steps, guidance and LoRA: the
  float image (DITSKIP_DUMP_IMAGE on the native side, generate()'s return on the Python side) within 1e-5 mean
  absolute error (measured: 0, the same bits) and the PNG's pixels identical; on flux-tiny at int8 with the hash text
  encoder, with and without a LoRA (one in a trained LoRA's format, big enough to change the picture), on sana-tiny
  at int8 decoding in four tile shapes (the blend) at guidance 1 (the cond branch alone), on a SanaPipeline bundle
  with a real Gemma-2 text encoder program and its tokenizer.json (the core's src/text tokenizes), and on
  flux-testbed with MiniLM's WordPiece vocabulary and text encoder program;
- the LoRA merged at the weights' bit width gives the Python runtime's merged file byte for byte (codes, scales,
  header) at int8, int4 and fp32 (B @ A accumulated as OpenBLAS' sgemm does: fused multiply-adds over the rank), and
  the second call reuses it (not rewritten);
- the summary has the Python runtime's fields in its order, with its values (timings and footprint aside);
- bad input is refused with the Python runtime's message, one line, exit code 2, and no picture: empty prompt,
  over-long prompt (its word count; MiniLM's WordPiece and a pipeline's Gemma token counts), a LoRA of another
  model, a LoRA whose shapes do not fit, a generation weights file changed or missing, --steps 0 / 1001,
  --guidance 101, --seed -1, an --out that is not a .png or is a folder;
- the data layer's pieces the tiny bundles leave out equal numpy's bit for bit: the sigmas with shift and dynamic
  shifting (exponential, linear), the hash text's words on Unicode prompts, quantization at ties and zero rows;
- the C API's progress callback sees each sampler step and cancels (DITSKIP_CANCELLED, no picture);
- arm64 under qemu: the tiniest bundle at 2 steps gives the x86-64 build's picture within 1e-5 mean absolute error
  (ExecuTorch's arm64 kernels fuse multiply-adds: not bit for bit), and a refusal is the same line.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import compile_tiny
from device_tests import native_runtime

pytest.importorskip("executorch")

PROMPT = "a photo of sks toy"
MAE = 1e-5                      # mean absolute error on the float image in [0, 1] (issue 56)
TIMING_FIELDS = {"seconds", "seconds_merge", "seconds_text", "seconds_sampling", "seconds_per_step",
                 "seconds_decode", "footprint", "out"}


@pytest.fixture(scope="module")
def gen_sana_tiles(tmp_path_factory) -> Path:
    """test_generation.py's gen_sana (the same request: its programs come from the run's program cache): sana-tiny,
    latent 8 x 8 decoded in tiles of 4 with stride 3 (four tile shapes)."""
    from export.generation_stage import GenerationPrograms
    return compile_tiny(tmp_path_factory.mktemp("ngen-sana") / "bundle", "sana-tiny", steps=2,
                        programs=[GenerationPrograms(("fp32", "int8"), steps=3, decode_tile_px=128)])


@pytest.fixture(scope="module")
def gen_sana_pipe(tmp_path_factory) -> Path:
    """test_generation.py's gen_sana_pipe (the same request): a SanaPipeline folder with a real (toy-size) Gemma-2 text
    encoder and a Gemma-style BPE tokenizer.json (tests/tiny_pipeline.py), compiled with the generation part at
    fp32: the encoder a program, its tokenizer.json read by the core's src/text."""
    from test_generation import _pipeline_bundle
    return _pipeline_bundle(tmp_path_factory, "sana")


def _random_lora(bundle: Path, out_dir: Path) -> Path:
    from test_generation import random_lora
    return random_lora(bundle, out_dir)


def _native(runner, bundle: Path, out: Path, *extra, prompt: str = PROMPT, dump: Path | None = None):
    env = {"DITSKIP_DUMP_IMAGE": str(dump)} if dump is not None else {}
    return native_runtime.run(runner, "generate", bundle, "--prompt", prompt, "--out", out, "--json", *extra, env=env)


def _python(bundle: Path, out: Path, precision: str, seed: int, steps: int, guidance: float,
            lora: Path | None = None):
    from ditskip_edge.runtime.generation import GenerateRequest, generate
    return generate(bundle, GenerateRequest(PROMPT, seed, steps, guidance, lora=lora, precision=precision, out=out),
                    progress=False)


def _pixels(png: Path) -> np.ndarray:
    from PIL import Image
    return np.asarray(Image.open(png).convert("RGB"))


def _same_picture(runner, bundle: Path, tmp_path: Path, precision: str, seed: int, steps: int, guidance: float,
                  lora: Path | None = None, python_lora: Path | None = None) -> tuple[np.ndarray, dict]:
    """Both runtimes draw the picture; asserts the float images within MAE, the PNG pixels equal and the summaries
    alike. -> (the native float image, the native summary)."""
    args = ["--precision", precision, "--seed", seed, "--steps", steps, "--guidance", guidance]
    args += ["--lora", lora] if lora is not None else []
    r = _native(runner, bundle, tmp_path / "native.png", *args, dump=tmp_path / "native.raw")
    assert r.returncode == 0, r.stderr
    native = json.loads(r.stdout)
    image, python = _python(bundle, tmp_path / "python.png", precision, seed, steps, float(guidance), python_lora)
    got = np.fromfile(tmp_path / "native.raw", np.float32).reshape(image.shape)
    mae = float(np.abs(got - image).mean())
    assert mae <= MAE, mae
    assert np.array_equal(_pixels(tmp_path / "native.png"), _pixels(tmp_path / "python.png"))
    python["lora"] = None if lora is None else str(lora)            # each runtime names its own copy of the LoRA
    assert list(native) == list(python)
    assert {k: v for k, v in native.items() if k not in TIMING_FIELDS} == \
           {k: v for k, v in python.items() if k not in TIMING_FIELDS}
    assert list(native["footprint"]) == list(python["footprint"]) and native["out"] == str(tmp_path / "native.png")
    return got, native


# ---------------------------------------------------------------------------------------------- the picture

def test_native_picture_equals_the_python_runtimes_with_and_without_a_merged_lora(runner, generation_bundle,
                                                                                  tmp_path):
    base, _ = _same_picture(runner, generation_bundle, tmp_path / "base", "int8", 3, 2, 3.0)
    lora = _random_lora(generation_bundle, tmp_path / "lora")
    python_lora = tmp_path / "python_lora"
    shutil.copytree(lora.parent, python_lora)
    tuned, summary = _same_picture(runner, generation_bundle, tmp_path / "tuned", "int8", 3, 2, 3.0, lora.parent,
                                   python_lora)
    assert float(np.abs(tuned - base).mean()) > 100 * MAE          # the LoRA is in the picture
    merged = lora.parent / "merged" / "int8.safetensors"
    assert merged.read_bytes() == (python_lora / "merged" / "int8.safetensors").read_bytes()
    before = merged.stat()
    r = _native(runner, generation_bundle, tmp_path / "again.png", "--precision", "int8", "--seed", 3, "--steps", 2,
                "--lora", lora)
    assert r.returncode == 0, r.stderr
    after = merged.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)   # reused, not rewritten
    assert np.array_equal(_pixels(tmp_path / "again.png"), _pixels(tmp_path / "tuned" / "native.png"))
    from ditskip_edge.runtime.bundle import Bundle
    from ditskip_edge.runtime.generation import Generator
    for precision in ("fp32", "int4"):                  # the other bit widths' layouts: plain sum, packed groups
        r = _native(runner, generation_bundle, tmp_path / f"{precision}.png", "--precision", precision, "--steps", 1,
                    "--lora", lora)
        assert r.returncode == 0, r.stderr
        gen = Generator(Bundle.open(generation_bundle, verify=False), precision)
        gen.lora_weights(python_lora, gen.base_weights())
        assert (lora.parent / "merged" / f"{precision}.safetensors").read_bytes() == \
               (python_lora / "merged" / f"{precision}.safetensors").read_bytes()


def test_native_tiled_decode_at_guidance_one_equals_the_python_runtimes(runner, gen_sana_tiles, tmp_path):
    _same_picture(runner, gen_sana_tiles, tmp_path, "int8", 5, 2, 1.0)


def test_native_picture_of_a_pipeline_bundle_with_a_real_tokenizer_and_text_encoder_equals_the_python_runtimes(
        runner, gen_sana_pipe, tmp_path, capsys):
    _same_picture(runner, gen_sana_pipe, tmp_path, "fp32", 3, 2, 3.0)
    _same_refusal(runner, gen_sana_pipe, tmp_path / "x.png", [], "sks " * 400,
                  "gemma tokens incl. special tokens; the text encoder takes at most 300", capsys)


def test_native_picture_of_a_minilm_bundle_equals_the_python_runtimes(runner, generation_testbed_bundle, tmp_path,
                                                                     capsys):
    """flux-testbed: MiniLM's WordPiece vocab.txt (src/text) and the text_encoder program."""
    _same_picture(runner, generation_testbed_bundle, tmp_path, "fp32", 3, 2, 3.0)
    _same_refusal(runner, generation_testbed_bundle, tmp_path / "x.png", [],
                  "a large teal star with an orange centre on a white background in the sun",
                  "18 WordPiece tokens incl. [CLS] [SEP]; the text encoder takes at most 16", capsys)


CANCEL_SCRIPT = """
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
CB = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_char_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p)
class Params(ctypes.Structure):
    _fields_ = [("prompt", ctypes.c_char_p), ("seed", ctypes.c_uint64), ("steps", ctypes.c_int32),
                ("guidance", ctypes.c_double), ("lora", ctypes.c_char_p), ("precision", ctypes.c_char_p),
                ("out_png", ctypes.c_char_p), ("progress", CB), ("progress_user_data", ctypes.c_void_p)]
seen = []
def progress(stage, done, total, user):
    seen.append([stage.decode(), done, total])
    return done < 1
p = Params()
lib.ditskip_generate_default_params_ref(ctypes.byref(p))
defaults = [p.steps, p.guidance]
keep = CB(progress)
p.prompt, p.out_png, p.progress = b"a photo of sks toy", sys.argv[3].encode(), keep
lib.ditskip_last_error.restype = ctypes.c_char_p
status = lib.ditskip_generate(sys.argv[2].encode(), ctypes.byref(p), None)
print(json.dumps({"status": status, "error": lib.ditskip_last_error().decode(), "seen": seen,
                  "defaults": [defaults[0], str(defaults[1])]}))
"""


def test_a_progress_callback_returning_false_cancels_with_no_picture(runner, generation_bundle, tmp_path):
    """The C API's stage callback (ditskip_stage_callback) sees every sampler step; false stops the run: status
    DITSKIP_CANCELLED, nothing written. The default params take the bundle's steps and guidance."""
    import subprocess
    import sys
    out = tmp_path / "x.png"
    r = subprocess.run([sys.executable, "-c", CANCEL_SCRIPT, str(runner.library), str(generation_bundle), str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["defaults"] == [-1, "nan"]
    assert got["status"] == 1 and "cancelled after sampler step 1 of 3" in got["error"], got
    assert got["seen"] == [["generate", 1, 3]]
    assert not out.exists() and not list(tmp_path.glob(".*.tmp"))


# ---------------------------------------------------------------------------------------------- data layer

def _check(runner, *args) -> str:
    import subprocess
    r = subprocess.run([str(runner.binary.parent / "generate_check"), *map(str, args)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("steps,shift,dynamic,mu,kind", [
    (1, 1.0, False, None, "exponential"), (3, 1.0, False, None, "exponential"), (28, 3.0, False, None, "exponential"),
    (50, 1.0, True, 1.15, "exponential"), (20, 1.0, True, 0.8, "linear"), (7, 1.0, True, -0.3, "exponential")])
def test_native_sigmas_are_the_python_samplers_bit_for_bit(runner, steps, shift, dynamic, mu, kind):
    """FLUX's real schedule shifts dynamically (exponential, mu from the resolution): the tiny bundles do not."""
    from ditskip_edge.runtime.sampler import sigmas
    want = sigmas(steps, shift, dynamic, mu, kind).view(np.uint32)
    got = _check(runner, "sigmas", steps, shift, int(dynamic), "none" if mu is None else repr(mu), kind).split()
    assert [int(b, 16) for b in got] == want.tolist()


def test_native_hash_text_words_are_pythons_on_unicode_prompts(runner):
    from ditskip_edge.runtime.hash_text import words
    for prompt in ["A photo of SKS toy", "café naïve x\u212Aelvin \u0130stanbul", "日本 dog🐕2x  tabs\tand-dashes",
                   "MiXeD123abc ÀÉÎ ß"]:
        assert _check(runner, "words", prompt).split("\n")[:-1] == words(prompt), prompt


@pytest.mark.parametrize("precision,group", [("int8", 32), ("int4", 32), ("int4", 24)])
def test_native_quantization_is_the_python_runtimes_bit_for_bit_on_ties_zero_rows_and_ragged_groups(
        runner, precision, group, tmp_path):
    """Round half to even at the .5 ties, an all-zero row (the 1e-12 floor), a group size that does not divide the
    inputs (one group per row)."""
    from ditskip_edge.runtime.weights import quantize_linear
    g = np.random.default_rng(0)
    w = (g.standard_normal((6, 48)) * 0.1).astype(np.float32)
    w[1] = 0.0
    w[2, :4] = [1.0, -1.0, 0.5 / 127.5, 2.5 / 127.5]       # scale 1 / 127.5: codes at exact .5 ties
    w[2, 4:] = 0.0
    (tmp_path / "w.bin").write_bytes(w.tobytes())
    lines = _check(runner, "quantize", precision, 6, 48, group, tmp_path / "w.bin", tmp_path / "q.bin").splitlines()
    want = quantize_linear(w, precision, group)
    assert [ln.split()[0] for ln in lines] == sorted(want)
    assert (tmp_path / "q.bin").read_bytes() == b"".join(np.ascontiguousarray(want[k]).tobytes() for k in sorted(want))


# ---------------------------------------------------------------------------------------------- refusals

def _python_refusal(bundle: Path, out: Path, extra: list, prompt: str, capsys) -> tuple[int, str]:
    from ditskip_edge.runtime.__main__ import main
    code = main(["generate", str(bundle), "--prompt", prompt, "--out", str(out), *map(str, extra)])
    return code, capsys.readouterr().err


def _same_refusal(runner, bundle: Path, out: Path, extra: list, prompt: str, expect: str, capsys) -> None:
    folder = out.is_dir()
    code, py_err = _python_refusal(bundle, out, extra, prompt, capsys)
    r = _native(runner, bundle, out, *extra, prompt=prompt)
    assert code == 2 and r.returncode == 2, (code, py_err, r.returncode, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in py_err, r.stderr
    native_msg = r.stderr.strip().split(": error: ", 1)[1]
    python_msg = py_err.strip().split(": error: ", 1)[1]
    assert native_msg == python_msg and expect in native_msg, (native_msg, python_msg)
    assert (folder or not out.exists()) and not list(out.parent.glob(".*.tmp"))


REFUSALS = {
    "empty_prompt": ([], "  ", "--prompt is empty"),
    "over_long_prompt": ([], "one two three four five six seven eight nine", "--prompt has 9 words; the text encoder "
                                                                                 "takes at most 8"),
    "steps_zero": (["--steps", 0], PROMPT, "--steps 0: expected an integer from 1 to 1000"),
    "steps_over": (["--steps", 1001], PROMPT, "--steps 1001: expected an integer"),
    "guidance": (["--guidance", 101], PROMPT, "--guidance 101.0: expected a number in [0, 100]"),
    "seed": (["--seed", -1], PROMPT, "--seed -1: expected 0 <= seed < 2^63"),
    "out_not_png": ([], PROMPT, "expected a .png path"),
    "out_folder": ([], PROMPT, "is a folder: expected a .png path"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_bad_request_is_refused_with_the_python_runtimes_line_and_no_picture(case, runner, generation_bundle,
                                                                            tmp_path, capsys):
    extra, prompt, expect = REFUSALS[case]
    out = tmp_path / ("x.jpg" if case == "out_not_png" else "x.png")
    if case == "out_folder":
        out.mkdir()
    _same_refusal(runner, generation_bundle, out, extra, prompt, expect, capsys)


def test_lora_of_another_model_or_shape_is_refused_with_the_python_runtimes_line(runner, generation_bundle,
                                                                               gen_sana_tiles, tmp_path, capsys):
    from ditskip_edge.runtime.bundle import Bundle
    from ditskip_edge.runtime.safetensors_io import read_safetensors, write_lora
    sana_lora = _random_lora(gen_sana_tiles, tmp_path / "sana")
    _same_refusal(runner, generation_bundle, tmp_path / "x.png", ["--lora", sana_lora], PROMPT,
                  "a LoRA for another model or plan", capsys)
    tensors, _ = read_safetensors(_random_lora(generation_bundle, tmp_path / "ours"))
    wider = {k: np.concatenate([v, v], axis=1) if ".lora_A." in k else v for k, v in tensors.items()}
    bad = write_lora(tmp_path / "wider", wider, {k: k for k in wider},
                     Bundle.open(generation_bundle, verify=False).field("lora_file"))
    _same_refusal(runner, generation_bundle, tmp_path / "x.png", ["--lora", bad], PROMPT,
                  "does not fit the frozen weight", capsys)
    _same_refusal(runner, generation_bundle, tmp_path / "x.png", ["--lora", tmp_path / "none.safetensors"], PROMPT,
                  "no such file", capsys)


@pytest.mark.parametrize("damage", ["changed", "missing"])
def test_a_generation_weights_file_that_does_not_match_is_refused_with_the_python_runtimes_line(
        damage, runner, generation_bundle, tmp_path, capsys):
    from ditskip_edge.runtime.bundle import read_manifest
    bundle = tmp_path / "bundle"
    shutil.copytree(generation_bundle, bundle, ignore=shutil.ignore_patterns("runs", "subject", "model"))
    weights = bundle / read_manifest(bundle, verify=False)["generation"]["weights"]["int8"]
    if damage == "missing":
        weights.unlink()
    else:
        raw = bytearray(weights.read_bytes())
        raw[-1] ^= 0x01
        weights.write_bytes(bytes(raw))
    expect = "listed in the manifest but missing" if damage == "missing" else "SHA-256 does not match the manifest"
    _same_refusal(runner, bundle, tmp_path / "x.png", ["--precision", "int8", "--steps", 1], PROMPT, expect, capsys)


# ---------------------------------------------------------------------------------------------- arm64 (qemu)

def test_the_arm64_build_under_emulation_draws_the_x86_64_builds_picture(runner, arm64_runner, generation_bundle,
                                                                        tmp_path):
    args = ["--precision", "int8", "--seed", 1, "--steps", 2]
    x86 = _native(runner, generation_bundle, tmp_path / "x86.png", *args, dump=tmp_path / "x86.raw")
    arm = _native(arm64_runner, generation_bundle, tmp_path / "arm.png", *args, dump=tmp_path / "arm.raw")
    assert x86.returncode == 0 and arm.returncode == 0, (x86.stderr, arm.stderr)
    a, b = np.fromfile(tmp_path / "x86.raw", np.float32), np.fromfile(tmp_path / "arm.raw", np.float32)
    assert a.shape == b.shape and float(np.abs(a - b).mean()) <= MAE
    refused = _native(arm64_runner, generation_bundle, tmp_path / "x.png", "--steps", 1001)
    assert refused.returncode == 2
    assert refused.stderr.strip() == "ditskip-run generate: error: --steps 1001: expected an integer from 1 to 1000"
