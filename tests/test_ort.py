"""ONNX Runtime Training programs (issue 6): the exported training step is the eager one, the runtime trainer
runs the schedule like the eager trainer (with ORT's Hugging Face AdamW), files are valid and load in ORT 1.19.2."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from conftest import compile_tiny

from ditskip_edge.bundle_model import build_skip_model, open_bundle
from ditskip_edge.quantize import QuantSpec, quantize_frozen_linears
from ditskip_edge.training_step import TrainingStep
from export.ort_graph import OrtStep, StepSignature
from export.ort_trainer import OrtBundle, OrtTrainConfig, open_training, train_ort

STEPS = 20


def _compile(tmp_path_factory, model, bits, steps=STEPS, grad_accum=1):
    out = tmp_path_factory.mktemp(f"ort_{model}_{bits}") / "bundle"
    return compile_tiny(out, model, steps=steps, grad_accum=grad_accum, runtimes=["ort"], quant=QuantSpec(bits=bits))


@pytest.fixture(scope="module")
def flux_ort(tmp_path_factory) -> Path:
    """flux-tiny, front 1 / back 2 of 6 blocks, int8 frozen weights, 20 steps."""
    return _compile(tmp_path_factory, "flux-tiny", 8)


@pytest.fixture(scope="module")
def sana_ort(tmp_path_factory) -> Path:
    """sana-tiny, front 1 / back 2 of 6 blocks, packed int4 frozen weights, 20 steps of 2 samples."""
    return _compile(tmp_path_factory, "sana-tiny", 4, grad_accum=2)


@pytest.fixture(scope="module")
def bundles(flux_ort, sana_ort) -> dict[str, Path]:
    return {"flux": flux_ort, "sana": sana_ort}


class EagerReference:
    """The eager model the ORT program was exported from (same quantized frozen weights, LoRA from the program's
    initial checkpoint), fed the same arrays."""

    def __init__(self, bundle: Path):
        b = open_bundle(bundle)
        self.model, self.transformer, self.names = build_skip_model(b)
        quantize_frozen_linears(self.model.view, QuantSpec(bits=b.manifest["programs"]["ort"]["quant"]["bits"]))
        entry = b.cache.read_encoded(0)       # as stored; the bundle's codec decodes inside the step (issue 4)
        self.step = OrtStep(TrainingStep(self.model, b.cache.decoder()), StepSignature.of(b.cond, entry))
        self.params = {n: p for n, p in self.transformer.named_parameters() if p.requires_grad}
        # start from the program's checkpoint: peft draws LoRA A afresh (unseeded) in every build_skip_model
        state, _, _ = open_training(OrtBundle(bundle))
        with torch.no_grad():
            for n, p in self.params.items():
                p.copy_(torch.from_numpy(np.array(state.parameters[n].data)))

    def loss(self, arrays: list[np.ndarray]) -> torch.Tensor:
        return self.step(*[torch.from_numpy(a.copy()) for a in arrays])


def _random_lora_b(ref: EagerReference, seed: int = 0) -> dict[str, np.ndarray]:
    g = torch.Generator().manual_seed(seed)
    out = {}
    with torch.no_grad():
        for n, p in ref.params.items():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
                out[n] = p.detach().numpy().copy()
    return out


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(a), 1e-30))


@pytest.mark.parametrize("arch", ["flux", "sana"])
def test_exported_files_pass_onnx_checker_and_load_in_ort_1_19_2(bundles, arch):
    import onnxruntime
    assert onnxruntime.__version__ == "1.19.2"
    b = OrtBundle(bundles[arch])
    for key in ("training_model", "eval_model", "optimizer_model"):
        model = onnx.load(str(b.artifact(key)))
        onnx.checker.check_model(model)
        assert model.ir_version <= 10
        assert all(o.version <= 21 for o in model.opset_import if o.domain in ("", "ai.onnx"))
    onnx.checker.check_model(onnx.load(str(b.program_dir / b.program["patch_sampler"]["path"])))
    state, module, optimizer = open_training(b)
    assert module.input_names() == b.input_names
    assert set(b.program["trainable"]) == {n for n, p in state.parameters if p.requires_grad}


@pytest.mark.parametrize("arch,code_dtype", [("flux", np.int8), ("sana", np.uint8)])
def test_frozen_weights_stay_integers_in_the_checkpoint(bundles, arch, code_dtype):
    """int8 codes (FLUX bundle) and packed int4 bytes (SANA bundle) are integer tensors in the ORT checkpoint,
    linears and SANA's convolutions alike, and the checkpoint is smaller than the kept fp32 weights."""
    b = OrtBundle(bundles[arch])
    state, _, _ = open_training(b)
    codes = {n: p.data for n, p in state.parameters if n.endswith(("w_codes", "w_packed"))}
    q = b.program["quant"]
    assert len(codes) == q["quantized_layers"] == q["quantized_linears"] + q["quantized_convs"] > 0
    assert (q["quantized_convs"] > 0) == (arch == "sana")
    assert all(v.dtype == code_dtype for v in codes.values())
    assert b.artifact("checkpoint").stat().st_size < b.manifest["model_stage"]["kept_weight_bytes"]


@pytest.mark.parametrize("arch", ["flux", "sana"])
def test_loss_and_lora_grads_match_eager(bundles, arch):
    """One sample, non-zero LoRA B (so lora_A gets gradients): ORT loss and every LoRA gradient equal eager's
    within 1e-4 relative (fp32)."""
    b = OrtBundle(bundles[arch])
    ref = EagerReference(bundles[arch])
    lora_b = _random_lora_b(ref)
    state, module, _ = open_training(b)
    for n, v in lora_b.items():
        state.parameters[n].data = v
    arrays = b.step_inputs(b.samples[3])
    loss_ort = float(np.asarray(module(*arrays)))
    loss_eager = ref.loss(arrays)
    loss_eager.backward()
    assert abs(loss_ort - loss_eager.item()) <= 1e-4 * abs(loss_eager.item())
    g_eager = np.concatenate([ref.params[n].grad.numpy().ravel() for n in b.program["trainable"]])
    g_ort = np.concatenate([state.parameters[n].grad.ravel() for n in b.program["trainable"]])
    assert np.linalg.norm(g_eager) > 0
    assert _rel(g_eager, g_ort) <= 1e-4
    for n in b.program["trainable"]:
        ge, go = ref.params[n].grad.numpy(), state.parameters[n].grad
        assert np.linalg.norm(ge - go) <= 1e-4 * np.linalg.norm(ge) + 1e-9, n


def hf_adamw_(params: dict[str, torch.Tensor], state: dict, k: int, lr: float, betas, eps: float, wd: float) -> None:
    """ORT's AdamWOptimizer, adam_mode=1 (Hugging Face): bias correction folded into the step size, decay after."""
    b1, b2 = betas
    step_size = lr * math.sqrt(1 - b2 ** k) / (1 - b1 ** k)
    with torch.no_grad():
        for n, p in params.items():
            m, v = state.setdefault(n, (torch.zeros_like(p), torch.zeros_like(p)))
            m.mul_(b1).add_(p.grad, alpha=1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.sub_(step_size * m / (v.sqrt() + eps))
            p.sub_(lr * wd * p)


def eager_hf_adamw_run(bundle: Path, steps: int) -> tuple[list[float], dict[str, np.ndarray]]:
    b = OrtBundle(bundle)
    ref = EagerReference(bundle)
    o = b.program["optimizer"]
    state, losses = {}, []
    for step in range(steps):
        total = 0.0
        for sample in b.samples_for_step(step):
            loss = ref.loss(b.step_inputs(sample))
            loss.backward()
            total += loss.item()
        hf_adamw_(ref.params, state, step + 1, o["lr"], o["betas"], o["eps"], o["weight_decay"])
        for p in ref.params.values():
            p.grad = None
        losses.append(total)
    return losses, {n: p.detach().numpy().copy() for n, p in ref.params.items()}


@pytest.fixture(scope="module")
def ort_runs(bundles, tmp_path_factory) -> dict[str, dict]:
    return {arch: train_ort(bundle, OrtTrainConfig(run_dir=tmp_path_factory.mktemp(f"run_{arch}")))
            for arch, bundle in bundles.items()}


@pytest.mark.parametrize("arch", ["flux", "sana"])
def test_twenty_steps_track_eager_with_the_same_adamw(bundles, ort_runs, arch):
    """20 optimizer steps (SANA: 2 samples each): per-step losses within 1e-3 relative of an eager run that applies
    ORT's update (Hugging Face AdamW) in torch; the trained LoRA too."""
    from safetensors.numpy import load_file
    run = ort_runs[arch]
    assert run["steps"] == STEPS and len(run["losses"]) == STEPS
    assert run["optimizer"] == "AdamW (huggingface)"
    losses, params = eager_hf_adamw_run(bundles[arch], STEPS)
    for k, (lo, le) in enumerate(zip(run["losses"], losses)):
        assert abs(lo - le) <= 1e-3 * abs(le), (k, lo, le)
    lora = load_file(run["lora"])
    keys = json.loads((OrtBundle(bundles[arch]).program_dir / "lora_format.json").read_text())["keys"]
    moved = [n for n in params if "lora_B" in n and np.abs(params[n]).max() > 1e-4]
    assert moved, "LoRA B never moved: the comparison would not test the optimizer"
    for n, key in keys.items():
        assert _rel(params[n], lora[key]) <= 1e-3 or np.abs(params[n] - lora[key]).max() <= 1e-6, n


def test_resume_continues_the_same_run(flux_ort, ort_runs, tmp_path):
    """Stopped after 7 steps and resumed: the same 20 losses and LoRA as the uninterrupted run (optimizer moments
    and step count are in the checkpoint)."""
    from safetensors.numpy import load_file
    cfg = OrtTrainConfig(run_dir=tmp_path, stop_after=7)
    first = train_ort(flux_ort, cfg)
    assert first["interrupted_at_step"] == 7
    resumed = train_ort(flux_ort, OrtTrainConfig(run_dir=tmp_path))
    assert resumed["resumed_from_step"] == 7
    np.testing.assert_allclose(resumed["losses"], ort_runs["flux"]["losses"], rtol=1e-6)
    a, b = load_file(resumed["lora"]), load_file(ort_runs["flux"]["lora"])
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("arch", ["flux", "sana"])
def test_lora_file_is_the_eager_trainers_format_and_loads_in_diffusers(bundles, ort_runs, arch, tmp_path):
    from safetensors import safe_open
    from ditskip_edge.lora import save_lora
    from ditskip_edge.models.loading import build_transformer
    from ditskip_edge.models.views import full_model_forward, make_view
    b = open_bundle(bundles[arch])
    _, transformer, _ = build_skip_model(b)
    from ditskip_edge.lora import lora_state_dict
    eager_path = save_lora(b.spec.arch, lora_state_dict(transformer), tmp_path, b.lora, b.kept_block_names)
    ort_path = Path(ort_runs[arch]["lora"])
    with safe_open(str(eager_path), "np") as fe, safe_open(str(ort_path), "np") as fo:
        assert set(fe.keys()) == set(fo.keys())
        assert fe.metadata() == fo.metadata()
    full = build_transformer(b.spec)
    entry = b.cache.read(0)
    x_t = make_view(b.spec.arch, full).pack(entry["x0"])
    t = torch.tensor([0.5])
    with torch.no_grad():
        before = full_model_forward(b.spec.arch, full, x_t, t, b.cond)
        full.load_lora_adapter(str(ort_path.parent), weight_name=ort_path.name, prefix="transformer",
                               adapter_name="ort")
        after = full_model_forward(b.spec.arch, full, x_t, t, b.cond)
    assert (after - before).abs().max() > 1e-6


def test_patch_sampler_onnx_matches_torch(flux_ort):
    """The preprocessing program: crop box as data, any photo size, output equals PatchSampler's."""
    import onnxruntime
    from ditskip_edge.patch_sampling import PatchSampler
    b = OrtBundle(flux_ort)
    sess = onnxruntime.InferenceSession(str(b.program_dir / b.program["patch_sampler"]["path"]),
                                        providers=["CPUExecutionProvider"])
    out_px = b.schedule["config"]["s_min_px"]
    torch_sampler = PatchSampler(out_px)
    g = torch.Generator().manual_seed(0)
    for h, w, box in [(300, 200, (10.0, 37.0, 160.0)), (256, 256, (0.0, 0.0, 256.0)), (200, 333, (5.0, 3.0, 128.0))]:
        image = torch.rand(1, 3, h, w, generator=g) * 2 - 1
        crop = torch.tensor(box)
        got = sess.run(None, {"image": image.numpy(), "crop_box": crop.numpy()})[0]
        np.testing.assert_allclose(got, torch_sampler(image, crop).numpy(), atol=1e-5)
        assert got.shape == (1, 3, out_px, out_px)


def test_memory_report_in_a_fresh_process_without_torch(flux_ort):
    from export.ort_memory import measure_step_memory
    report = measure_step_memory(flux_ort)
    assert report["torch_available"] is False
    assert report["peak_rss_bytes"] >= report["rss_after_load_bytes"] > 0
    assert report["checkpoint_bytes"] > 0 and report["model_bytes"] > 0


def test_cli_train_runtime_ort_json(flux_ort, tmp_path, capsys):
    from ditskip_edge.cli import main
    rc = main(["train", str(flux_ort), "--runtime", "ort", "--steps", "2", "--run-dir", str(tmp_path), "--json"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["runtime"] == "ort" and len(summary["losses"]) == 2
    assert Path(summary["lora"]).is_file() and summary["memory"]["peak_rss_bytes"] > 0


class Int8RowDecoder(torch.nn.Module):
    """A toy compressed-cache decoder (int8 codes + one fp32 scale per token) for the in-graph decode test."""

    def forward(self, entry):
        names = {k.rsplit(".", 1)[0] for k in entry if k.endswith(".codes")}
        return {n: entry[f"{n}.codes"].to(torch.float32) * entry[f"{n}.scale"] for n in names}


def _int8_rows(d: torch.Tensor) -> dict[str, torch.Tensor]:
    scale = d.abs().amax(-1, keepdim=True).clamp_min(1e-12) / 127
    return {"codes": torch.round(d / scale).to(torch.int8), "scale": scale}


def test_compressed_cache_entry_is_decoded_in_the_ort_graph(flux_ort, tmp_path):
    """With a codec cache the graph's entry inputs are the stored integer codes and scales; ORT decodes them
    in-graph and its loss and LoRA gradients still equal eager's (decoder in torch) within 1e-4."""
    from export.ort_artifacts import generate_training_artifacts
    from export.ort_graph import export_step_onnx, step_inputs
    from ditskip_edge.sample_inputs import sample_noise
    b = open_bundle(flux_ort)
    model, transformer, names = build_skip_model(b)
    quantize_frozen_linears(model.view, QuantSpec(bits=8))
    stored = b.cache.read(2)
    encoded = {"x0": stored["x0"]}
    for k, v in stored.items():
        if k != "x0":
            encoded.update({f"{k}.{part}": t for part, t in _int8_rows(v).items()})
    sig = StepSignature.of(b.cond, encoded)
    step = OrtStep(TrainingStep(model, Int8RowDecoder()), sig)
    sample = b.schedule.samples[2]
    inputs = step_inputs(sig, stored["x0"], sample_noise(sample, tuple(stored["x0"].shape)),
                         torch.tensor([sample.t]), b.cond, encoded)
    graph = export_step_onnx(step, inputs, tmp_path / "step.onnx", transformer)
    assert {i.name: i.type.tensor_type.elem_type for i in graph.graph.input}["entry.front.img.codes"] == \
        onnx.TensorProto.INT8
    art = generate_training_artifacts(graph, names, tmp_path / "art")
    from export.ort_trainer import CheckpointState, Module
    state = CheckpointState.load_checkpoint(str(art["checkpoint"]))
    module = Module(str(art["training_model.onnx"]), state, str(art["eval_model.onnx"]))
    module.train()
    params = {n: p for n, p in transformer.named_parameters() if p.requires_grad}
    for n, v in _random_lora_b_params(params).items():
        state.parameters[n].data = v
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(torch.from_numpy(np.array(state.parameters[n].data)))
    loss_ort = float(np.asarray(module(*[x.numpy() for x in inputs])))
    loss_eager = step(*inputs)
    loss_eager.backward()
    assert abs(loss_ort - loss_eager.item()) <= 1e-4 * loss_eager.item()
    g_e = np.concatenate([params[n].grad.numpy().ravel() for n in names])
    g_o = np.concatenate([state.parameters[n].grad.ravel() for n in names])
    assert _rel(g_e, g_o) <= 1e-4


def _random_lora_b_params(params, seed=1) -> dict[str, np.ndarray]:
    g = torch.Generator().manual_seed(seed)
    return {n: (torch.randn(p.shape, generator=g) * 0.05).numpy() for n, p in params.items() if "lora_B" in n}


def test_runtime_reads_sharded_cache_entries(tmp_path):
    """The runtime's entry reader takes the binary-shard cache layout too: only the sample's bytes, hash-checked."""
    import hashlib
    from export.ort_trainer import CacheEntries
    from ditskip_edge.runtime.errors import BundleError
    x0 = np.arange(8, dtype=np.float32).reshape(1, 2, 2, 2)
    codes = np.arange(-6, 6, dtype=np.int8).reshape(1, 3, 4)
    layout = {"x0": {"dtype": "float32", "shape": [1, 2, 2, 2], "offset": 0, "bytes": 32},
              "back.img.codes": {"dtype": "int8", "shape": [1, 3, 4], "offset": 64, "bytes": 12}}
    entry = bytearray(128)
    entry[0:32], entry[64:76] = x0.tobytes(), codes.tobytes()
    (tmp_path / "shard_00000.bin").write_bytes(bytes(16) + bytes(entry))
    index = {"layout": layout, "entries": [{"shard": "shard_00000.bin", "offset": 16, "bytes": 128,
                                            "sha256": hashlib.sha256(bytes(entry)).hexdigest()}]}
    (tmp_path / "cache_index.json").write_text(json.dumps(index))
    got = CacheEntries(tmp_path).read_encoded(0)
    np.testing.assert_array_equal(got["x0"], x0)
    np.testing.assert_array_equal(got["back.img.codes"], codes)
    index["entries"][0]["sha256"] = "0" * 64
    (tmp_path / "cache_index.json").write_text(json.dumps(index))
    with pytest.raises(BundleError):
        CacheEntries(tmp_path).read_encoded(0)


def test_each_runtime_refuses_the_other_runtimes_bundle_with_a_clear_error(flux_ort, tmp_path, capsys):
    """An ORT bundle trained with --runtime executorch (and an eager-only bundle with --runtime ort): one line, exit 2."""
    from conftest import compile_tiny
    from ditskip_edge.cli import main
    assert main(["train", str(flux_ort), "--runtime", "executorch", "--run-dir", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "no executorch program" in err and "Traceback" not in err
    eager_only = compile_tiny(tmp_path / "eager_only", steps=1)
    assert main(["train", str(eager_only), "--runtime", "ort", "--run-dir", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "no ORT programs" in err and "Traceback" not in err
