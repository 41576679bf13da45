"""The user's path through the CLI: compile -> bundle -> train -> a LoRA diffusers loads; bad input; resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from PIL import Image

from conftest import PHOTOS, compile_tiny, train_eager
from compiler.cli import main
from ditskip_edge.models.loading import build_transformer, build_vae, resolve_spec, save_pipeline_folder
from ditskip_edge.models.text import encode_prompt
from ditskip_edge.models.views import full_model_forward
from ditskip_edge.runtime.bundle import read_manifest
from ditskip_edge.runtime.errors import BundleError


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_compile_json_prints_one_document_and_a_complete_bundle(tmp_path, capsys):
    out = tmp_path / "b"
    code, stdout, _ = _run(capsys, "compile", "--images", str(PHOTOS), "--prompt", "a photo of sks toy",
                           "--out", str(out), "--skip-front", "1", "--skip-back", "1", "--steps", "3", "--json")
    assert code == 0
    doc = json.loads(stdout)
    assert doc["plan"]["n_front"] == 1 and doc["num_samples"] == 3
    manifest = read_manifest(out)       # verifies every file's size and hash
    assert "model/kept_weights.safetensors" in manifest["files"]
    assert manifest["plan"]["chosen_by"] == "explicit"


def _lora_output(spec, lora_dir: Path | None):
    transformer = build_transformer(spec)
    if lora_dir is not None:
        from diffusers import FluxPipeline
        sd = FluxPipeline.lora_state_dict(str(lora_dir))
        sd = sd[0] if isinstance(sd, tuple) else sd
        transformer.load_lora_adapter(sd, prefix="transformer")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 64, 64, generator=g)
    with torch.no_grad():
        return full_model_forward(spec.arch, transformer, x, torch.tensor([0.5]), encode_prompt(spec, "a toy"))


def test_trained_lora_loads_into_the_full_diffusers_model_and_changes_its_output(flux_bundle, tmp_path, capsys):
    spec = resolve_spec("flux-tiny")
    base = _lora_output(spec, None)
    code, stdout, _ = _run(capsys, "train", str(flux_bundle), "--run-dir", str(tmp_path / "run"), "--json")
    assert code == 0
    summary = json.loads(stdout)
    assert len(summary["losses"]) == 6
    trained = _lora_output(spec, tmp_path / "run" / "lora")
    assert (trained - base).abs().max() > 1e-6


def test_the_lora_file_is_deterministic_and_holds_the_manifests_keys_and_metadata(flux_bundle, tmp_path):
    """Two runs of the same bundle write byte-identical LoRA files (the runtime's writer orders the safetensors
    header), with exactly the keys and metadata the compiler recorded from diffusers' save_lora_weights."""
    from safetensors import safe_open
    a = train_eager(flux_bundle, tmp_path / "a", steps=2)
    b = train_eager(flux_bundle, tmp_path / "b", steps=2)
    assert Path(a["lora"]).read_bytes() == Path(b["lora"]).read_bytes()
    record = read_manifest(flux_bundle)["lora_file"]
    with safe_open(a["lora"], "np") as f:
        assert sorted(f.keys()) == record["keys"] and f.metadata() == record["metadata"]


def test_interrupted_training_resumes_to_the_same_lora(flux_bundle, tmp_path):
    """Eager resume restores torch.optim.AdamW's state from the one checkpoint format: bit-identical LoRA."""
    train_eager(flux_bundle, tmp_path / "full", checkpoint_every=2)
    partial = train_eager(flux_bundle, tmp_path / "cut", checkpoint_every=2, stop_after=3)
    assert partial["interrupted_at_step"] == 3
    resumed = train_eager(flux_bundle, tmp_path / "cut", checkpoint_every=2)
    assert resumed["resumed_from_step"] == 3
    a = (tmp_path / "full" / "lora" / "pytorch_lora_weights.safetensors").read_bytes()
    assert (tmp_path / "cut" / "lora" / "pytorch_lora_weights.safetensors").read_bytes() == a


def test_a_linear_lr_schedule_sets_each_steps_rate_and_a_resumed_run_ends_with_the_same_lora(tmp_path, monkeypatch):
    """compile's OptimizerSpec(lr_schedule="linear") is in the manifest; the loop sets lr x (1 - step / steps) before
    each update (steps: the bundle's, also when --steps runs fewer), so the first step is a constant run's and the
    LoRA after four is not; an interrupted run resumes to the same LoRA, the rate following the step index."""
    from conftest import compile_tiny
    from ditskip_edge.eager import TorchAdamW
    from ditskip_edge.runtime.bundle import OptimizerSpec
    constant = compile_tiny(tmp_path / "constant", steps=4)
    linear = compile_tiny(tmp_path / "linear", steps=4, optimizer=OptimizerSpec(lr=1e-3, lr_schedule="linear"))
    assert read_manifest(linear)["optimizer"]["lr_schedule"] == "linear"
    assert read_manifest(constant)["optimizer"]["lr_schedule"] == "constant"
    rates, set_lr = [], TorchAdamW.set_lr
    monkeypatch.setattr(TorchAdamW, "set_lr", lambda self, lr: (rates.append(lr), set_lr(self, lr))[1])
    lora = {}
    for name, bundle in (("constant", constant), ("linear", linear)):
        for steps in (1, 4):
            summary = train_eager(bundle, tmp_path / f"{name}{steps}", steps=steps)
            lora[name, steps] = Path(summary["lora"]).read_bytes()
    assert rates == [1e-3] + [1e-3] * 4 + [1e-3] + [1e-3 * (1 - k / 4) for k in range(4)]
    assert lora["constant", 1] == lora["linear", 1] and lora["constant", 4] != lora["linear", 4]
    partial = train_eager(linear, tmp_path / "cut", checkpoint_every=1, stop_after=2)
    assert partial["interrupted_at_step"] == 2
    resumed = train_eager(linear, tmp_path / "cut")
    assert resumed["resumed_from_step"] == 2 and Path(resumed["lora"]).read_bytes() == lora["linear", 4]


def test_the_runtimes_adamw_at_a_rate_set_per_step_is_torch_adamw_with_the_same_rates():
    """runtime/adamw.py set_lr (what the ExecuTorch and ORT trainers' loop calls) against torch.optim.AdamW with its
    param group's lr changed before each step; an unknown schedule is refused where the spec is read."""
    import numpy as np
    import torch
    from ditskip_edge.runtime.adamw import AdamW
    from ditskip_edge.runtime.bundle import OptimizerSpec
    gen = np.random.default_rng(0)
    p0 = gen.standard_normal(32).astype(np.float32)
    grads = [gen.standard_normal(32).astype(np.float32) for _ in range(4)]
    spec = OptimizerSpec(lr=1e-2, weight_decay=1e-2, lr_schedule="linear")
    ours = AdamW(["w"], [p0.shape], lr=spec.lr, betas=spec.betas, eps=spec.eps, weight_decay=spec.weight_decay)
    p = {"w": p0.copy()}
    w = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    ref = torch.optim.AdamW([w], lr=spec.lr, betas=spec.betas, eps=spec.eps, weight_decay=spec.weight_decay)
    for k, g in enumerate(grads):
        ours.set_lr(spec.lr_at(k, len(grads)))
        ours.step(p, {"w": g})
        ref.param_groups[0]["lr"] = spec.lr_at(k, len(grads))
        w.grad = torch.from_numpy(g)
        ref.step()
    np.testing.assert_allclose(p["w"], w.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert [spec.lr_at(k, 4) for k in range(4)] == [1e-2, 7.5e-3, 5e-3, 2.5e-3]
    with pytest.raises(ValueError, match="lr_schedule 'cosine'"):
        OptimizerSpec.from_json({**spec.to_json(), "lr_schedule": "cosine"})
    assert OptimizerSpec.from_json({k: v for k, v in spec.to_json().items() if k != "lr_schedule"}).lr_schedule == \
        "constant"                                       # a bundle written before schedules existed


def test_sana_bundle_trains_and_its_lora_has_full_model_names(sana_bundle, tmp_path):
    from safetensors.torch import load_file
    s = train_eager(sana_bundle, tmp_path / "r")
    keys = load_file(s["lora"]).keys()
    # kept blocks are 1..3 of 6: LoRA names say so, in the full model's numbering
    blocks = {k.split(".")[2] for k in keys}
    assert blocks == {"1", "2", "3"} and all(k.startswith("transformer.transformer_blocks.") for k in keys)


def _assert_clean_failure(capsys, tmp_path, out: Path, *argv, expect: str):
    code, stdout, err = _run(capsys, *argv)
    assert code == 2
    assert expect in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.tmp")]


def _compile_args(images, out, *extra):
    return ["compile", "--images", str(images), "--prompt", "a photo of sks toy", "--out", str(out),
            "--skip-front", "1", "--skip-back", "1", "--steps", "2", *extra]


def test_bad_input_gets_a_clear_error_and_no_half_written_bundle(tmp_path, capsys):
    out = tmp_path / "out"
    empty = tmp_path / "empty"
    empty.mkdir()
    _assert_clean_failure(capsys, tmp_path, out, *_compile_args(empty, out), expect="is empty")
    _assert_clean_failure(capsys, tmp_path, out, *_compile_args(tmp_path / "nope", out), expect="does not exist")
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    Image.new("RGB", (300, 300)).save(mixed / "a.png")
    (mixed / "notes.txt").write_text("hello")
    _assert_clean_failure(capsys, tmp_path, out, *_compile_args(mixed, out), expect="notes.txt: not an image")
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "broken.png").write_bytes(b"not a png")
    _assert_clean_failure(capsys, tmp_path, out, *_compile_args(fake, out), expect="cannot be read as an image")
    _assert_clean_failure(capsys, tmp_path, out, *_compile_args(PHOTOS, out)[:-6], "--skip-front", "3",
                          "--skip-back", "3", "--steps", "2", expect="leaves no kept block")
    _assert_clean_failure(capsys, tmp_path, out, *_compile_args(PHOTOS, out, "--model", "flux-huge"),
                          expect="unknown model 'flux-huge'")
    _assert_clean_failure(capsys, tmp_path, out, *_compile_args(PHOTOS, out, "--model", "flux-dev"),
                          expect="no weights here")
    _assert_clean_failure(capsys, tmp_path, out, *_compile_args(PHOTOS, out, "--encode-tile-px", "40"),
                          expect="AutoencoderKL overlaps its tiles by a quarter")
    _assert_clean_failure(capsys, tmp_path, out, *_compile_args(PHOTOS, out, "--encode-tile-px", "0"),
                          expect="expected a positive number of pixels")
    _assert_clean_failure(capsys, tmp_path, out, *_compile_args(PHOTOS, out, "--encode-stages"),
                          expect="are a model bundle's: leave out --images")
    model_args = [a for a in _compile_args(PHOTOS, out) if a not in ("--images", str(PHOTOS))]
    _assert_clean_failure(capsys, tmp_path, out, *model_args, "--model", "flux-testbed", "--encode-stages",
                          expect="there is no encoder to split")


def test_failure_inside_compilation_leaves_no_bundle(tmp_path, monkeypatch):
    import compiler.compile as c

    def boom(*a, **k):
        raise RuntimeError("disk full")
    monkeypatch.setattr(c, "compute_residuals", boom)
    with pytest.raises(RuntimeError):
        compile_tiny(tmp_path / "b", steps=2)
    assert list(tmp_path.iterdir()) == []


def test_tampered_bundle_is_refused(tmp_path):
    b = compile_tiny(tmp_path / "b", steps=2)
    w = b / "model" / "kept_weights.safetensors"
    data = bytearray(w.read_bytes())
    data[-1] ^= 0xFF
    w.write_bytes(bytes(data))
    with pytest.raises(BundleError, match="kept_weights.safetensors"):
        read_manifest(b)


def test_train_refuses_a_folder_that_is_not_a_bundle(tmp_path, capsys):
    code, _, err = _run(capsys, "train", str(tmp_path))
    assert code == 2 and "not a bundle" in err


@pytest.mark.parametrize("name", ["flux-tiny", "sana-tiny"])
def test_a_local_diffusers_folder_loads_and_compiles(name, tmp_path):
    spec = resolve_spec(name)
    transformer, vae = build_transformer(spec), build_vae(spec)
    folder = save_pipeline_folder(spec, transformer, vae, tmp_path / "model")
    local = resolve_spec(str(folder))
    assert local.arch == spec.arch and local.source != "builtin"
    loaded = build_transformer(local)
    for (k, a), (_, b) in zip(transformer.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), k
    b = compile_tiny(tmp_path / "bundle", str(folder), steps=2)
    assert read_manifest(b)["model"]["source"] == str(folder.resolve())


def test_real_size_configs_build_on_the_meta_device():
    from ditskip_edge.models.views import block_names_of
    sizes = {}
    for name, blocks in (("flux-dev", 57), ("sana-1600m", 20), ("sana-600m", 28)):
        m = build_transformer(resolve_spec(name), device="meta")
        assert len(block_names_of(m)) == blocks
        sizes[name] = sum(p.numel() for p in m.parameters())
    assert 11.5e9 < sizes["flux-dev"] < 12.5e9
    assert 1.4e9 < sizes["sana-1600m"] < 1.8e9 and 0.5e9 < sizes["sana-600m"] < 0.7e9


def test_a_local_pipeline_folder_with_real_text_encoders_conditions_on_the_prompt(tmp_path):
    """No hash encoder marker: the folder's own CLIP + T5 encode the prompt (through FluxPipeline.encode_prompt)."""
    from safetensors.torch import load_file
    from tiny_pipeline import save_tiny_flux_pipeline
    folder = save_tiny_flux_pipeline(tmp_path / "pipe")
    spec = resolve_spec(str(folder))
    assert spec.text.kind == "pipeline"
    a, b = encode_prompt(spec, "a photo of sks toy"), encode_prompt(spec, "a photo of sks dog")
    assert a["txt"].shape == (1, 512, 32) and a["pooled"].shape == (1, 32)
    assert not torch.equal(a["txt"], b["txt"])
    bundle = compile_tiny(tmp_path / "bundle", str(folder), steps=2)
    stored = load_file(str(bundle / "subject" / "text_conditioning.safetensors"))
    assert torch.equal(stored["txt"], a["txt"])


def test_lora_targets_all_linear_puts_a_lora_on_every_linear_layer_of_the_kept_blocks_alone(tmp_path, capsys):
    """`--lora-targets all-linear` (peft's term): the manifest's targets are every nn.Linear suffix of a block, and
    the trained LoRA file holds one A/B pair per linear layer of each kept block and none in a skipped one."""
    from safetensors import safe_open

    from ditskip_edge.lora import every_linear_suffix
    from ditskip_edge.models.views import block_names_of
    spec = resolve_spec("flux-tiny")
    out = tmp_path / "b"
    code, _, _ = _run(capsys, "compile", "--images", str(PHOTOS), "--prompt", "a photo of sks toy", "--out", str(out),
                      "--skip-front", "1", "--skip-back", "1", "--steps", "2", "--lora-targets", "all-linear", "--json")
    assert code == 0
    targets = read_manifest(out)["lora"]["targets"]
    assert targets == every_linear_suffix(spec.arch, spec.transformer_config)
    assert {"attn.to_q", "attn.add_q_proj", "ff.net.2", "norm1.linear", "proj_mlp"} <= set(targets)
    assert _run(capsys, "train", str(out), "--run-dir", str(tmp_path / "run"), "--json")[0] == 0
    with torch.device("meta"):
        model = build_transformer(spec, device="meta")
    names = block_names_of(model)
    kept = names[1:-1]
    linears = {f"{b}.{n}" for b in kept for n, m in model.get_submodule(b).named_modules()
               if isinstance(m, torch.nn.Linear)}
    with safe_open(str(tmp_path / "run" / "lora" / "pytorch_lora_weights.safetensors"), "pt") as f:
        adapted = {k.removeprefix("transformer.").rsplit(".lora_", 1)[0] for k in f.keys()}
    assert adapted == linears
