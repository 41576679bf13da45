"""ExecuTorch export and its step adapter under the runtime's loop. Exports are slow on 2 cores: programs are shared
by fixtures.

Properties protected:
- the exported joint program's loss and LoRA gradients equal eager PyTorch's (fp32 FLUX, int4 SANA, int8 FLUX)
- twenty ExecuTorch steps track the eager step's losses; interrupt + resume gives the same run
- the LoRA file trained by ExecuTorch has the eager run's keys and metadata and loads into diffusers
- the patch-sampling program equals the eager module; device-computed x0 is the host's to float rounding
- quantized programs are >= 3.5x (int8) / 6x (int4) smaller than fp32, and the recompute pass keeps dequantized
  weights out of the arena between forward and backward
- a bundle whose program or cache does not match its manifest is refused
- the XNNPACK int8 program's casts run in XNNPACK and --transposed-codes leaves no transpose of codes; both exact
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import compile_tiny, train_device, train_eager

pytest.importorskip("executorch")

RTOL = 1e-4


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / (a.norm() + 1e-30))


def _randomize_lora_b(module, seed=0) -> None:
    """B = 0 at init makes every lora_A gradient zero; random B makes the gradient check meaningful."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in module.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)


def _eager_loss_and_grads(module, inputs):
    params = {n: p for n, p in module.named_parameters() if p.requires_grad}
    for p in params.values():
        p.grad = None
    loss = module(*inputs)
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in params.items()}


def _check_program_matches_eager(buffer: bytes, module, inputs, set_params: bool = False, data: bytes | None = None):
    """`data`: the program's .ptd (its frozen weights), when they are not in the .pte."""
    from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer

    from ditskip_edge.runtime.bindings import training_module
    m = training_module(_load_for_executorch_from_buffer(buffer, data_map_buffer=data))
    loss_et = m.forward_backward("forward", inputs)[0]
    if set_params:       # write the eager module's LoRA into the runtime's parameters, then rerun
        eager = dict(module.named_parameters())
        for n, p in m.named_parameters().items():
            p.copy_(eager[n].detach())
        loss_et = m.forward_backward("forward", inputs)[0]
    loss, grads = _eager_loss_and_grads(module, inputs)
    grads_et = m.named_gradients()
    assert set(grads_et) == set(grads)
    assert abs(float(loss_et) - float(loss)) <= RTOL * abs(float(loss))
    worst = max(_rel(grads[n], grads_et[n]) for n in grads)
    assert worst <= RTOL, f"LoRA gradient rel. error {worst:.2e}"
    assert all(grads[n].abs().sum() > 0 for n in grads if "lora_A" in n)   # the check is not vacuous
    return float(loss), worst


# ------------------------------------------------------------------ bundle with ExecuTorch programs

@pytest.fixture(scope="module")
def et_bundle(tmp_path_factory) -> Path:
    """flux-tiny, front 1 / back 2 of 6 blocks, 20 steps, fp32 training program + preprocessing program.
    Two photos of one size (a photo and its mirror image), so one preprocessing program is exported."""
    from PIL import Image, ImageOps

    from conftest import PHOTOS
    photos = tmp_path_factory.mktemp("photos")
    with Image.open(PHOTOS / "toy_1.png") as im:
        im.convert("RGB").save(photos / "a.png")
        ImageOps.mirror(im.convert("RGB")).save(photos / "b.png")
    from export.executorch_stage import ExecutorchPrograms
    return compile_tiny(tmp_path_factory.mktemp("et") / "bundle", "flux-tiny", steps=20, images=photos,
                        programs=[ExecutorchPrograms(("fp32",))])


@pytest.fixture(scope="module")
def eager_run(et_bundle, tmp_path_factory) -> dict:
    return train_eager(et_bundle, tmp_path_factory.mktemp("eager"), resume=False)


@pytest.fixture(scope="module")
def et_run(et_bundle, tmp_path_factory) -> dict:
    return train_device(et_bundle, "executorch", tmp_path_factory.mktemp("etrun"), resume=False)


def test_manifest_lists_programs_with_memory_report(et_bundle):
    m = json.loads((et_bundle / "manifest.json").read_text())
    progs = {p["path"]: p for p in m["programs"]}
    step = progs["programs/executorch/train_step_fp32.pte"]
    assert [i["name"] for i in step["inputs"]][:3] == ["x0", "noise", "t"]
    mem = step["memory"]
    for key in ("planned_arena_bytes", "constant_bytes", "trainable_bytes", "optimizer_state_bytes",
                "cache_bytes_per_sample"):
        assert mem[key] > 0, key
    assert mem["optimizer_state_bytes"] == 2 * mem["trainable_bytes"]
    assert any(p["name"] == "preprocess" for p in m["programs"])
    assert set(step["trainable"].values()) == set(m["lora_file"]["keys"])


def test_train_step_defaults_to_block_remat_and_a_mapped_data_file(et_bundle):
    """The default program: block remat, frozen weights in train_step_<precision>.ptd, listed in the entry's `data`
    and in the manifest's files with its SHA-256; the .pte keeps no weight bytes."""
    m = json.loads((et_bundle / "manifest.json").read_text())
    step = next(p for p in m["programs"] if p["name"] == "train_step" and p["runtime"] == "executorch")
    assert step["remat"] == "blocks" and step["graph_passes"]["remat"]["recomputed_nodes"] > 0
    assert step["data"] == ["programs/executorch/train_step_fp32.ptd"]
    info = m["files"][step["data"][0]]
    assert info["bytes"] == (et_bundle / step["data"][0]).stat().st_size and len(info["sha256"]) == 64
    # inline: 0-d scalars and FLUX's rotary pair rotation [head_dim, head_dim] fp32 (models/rotary.py): ExecuTorch
    # keeps lifted constants in the .pte
    lifted = 1024 + 4 * int(m["model"]["transformer_config"].get("attention_head_dim", 0)) ** 2
    assert step["memory"]["constant_bytes_in_pte"] <= lifted < step["memory"]["external_data_bytes"]


def test_runtime_maps_the_data_file_without_locking_it(et_bundle):
    """ExecutorchStep loads .pte + .ptd with mlock refused (ExecuTorch's Python loader would lock what it maps):
    nothing locked after the first step, which loads the methods."""
    from ditskip_edge.runtime.bundle import Bundle
    from ditskip_edge.runtime.executorch import ExecutorchStep
    from ditskip_edge.runtime.footprint import read_footprint
    from ditskip_edge.runtime.inputs import StepInputs
    before = read_footprint()
    b = Bundle.open(et_bundle)
    step = ExecutorchStep(b)
    step.prepare(StepInputs(b)(b.schedule.samples[0]))
    assert read_footprint().locked_bytes - before.locked_bytes == 0
    assert all(np.isfinite(v).all() for v in step.parameters().values())


def test_flux_fp32_program_matches_eager(et_bundle):
    from ditskip_edge.bundle_model import open_bundle
    from ditskip_edge.quantize import QuantSpec
    from export.executorch_program import build_step
    step = build_step(open_bundle(et_bundle), QuantSpec("fp32"))
    _randomize_lora_b(step.module)
    buffer = (et_bundle / "programs/executorch/train_step_fp32.pte").read_bytes()
    data = (et_bundle / "programs/executorch/train_step_fp32.ptd").read_bytes()
    _check_program_matches_eager(buffer, step.module, step.example, set_params=True, data=data)


def test_sana_int4_program_matches_eager(sana_bundle):
    from ditskip_edge.bundle_model import open_bundle
    from ditskip_edge.quantize import QuantSpec
    from export.executorch_program import ExportConfig, build_step, export_training_program
    from ditskip_edge.quantize import QuantConv2d
    step = build_step(open_bundle(sana_bundle), QuantSpec("int4"))
    assert step.n_quantized > 0
    assert any(isinstance(m, QuantConv2d) for m in step.module.modules())     # GLUMBConv's convs are int4 too
    _randomize_lora_b(step.module)
    # frozen constants in the .ptd (compile's default): views of external constants must not reach the emitter
    prog = export_training_program(step, ExportConfig(quant=QuantSpec("int4"), external_weights=True))
    assert prog.passes["empty_permuted"] > 0 and prog.passes["negative_pad"] > 0   # the SANA graph fixes ran
    # the 1x1 convolutions and their backward are matmuls; only the depthwise 3x3s stay convolutions, and their
    # input gradients are convolutions too (no convolution_backward keeps the forward's input alive)
    depthwise = sum(isinstance(m, QuantConv2d) and m.groups > 1 for m in step.module.modules())
    assert prog.passes["pointwise_conv_to_mm"] >= 2 * depthwise
    assert prog.passes["input_grad_conv"] == depthwise > 0
    assert "convolution_backward" not in prog.ops["portable_ops"]
    (data,) = prog.data.values()
    _check_program_matches_eager(prog.buffer, step.module, step.example, data=data)


def test_runtime_trainer_tracks_eager_trainer(eager_run, et_run):
    le, lr = np.array(eager_run["losses"]), np.array(et_run["losses"])
    assert len(le) == len(lr) == 20
    rel = np.abs(le - lr) / np.abs(le)
    assert rel.max() <= 1e-3, rel
    assert le[0] != le[-1]          # parameters moved


def test_runtime_trainer_resume_equals_uninterrupted(et_bundle, et_run, tmp_path):
    first = train_device(et_bundle, "executorch", tmp_path, stop_after=7, checkpoint_every=5)
    assert first["interrupted_at_step"] == 7
    rest = train_device(et_bundle, "executorch", tmp_path, checkpoint_every=5)
    assert rest["resumed_from_step"] == 7
    np.testing.assert_allclose(rest["losses"], et_run["losses"], rtol=1e-6)


def test_runtime_lora_file_is_the_eager_format_and_loads_in_diffusers(et_bundle, eager_run, et_run):
    from safetensors import safe_open

    from ditskip_edge.bundle_model import open_bundle
    from ditskip_edge.models.loading import build_transformer
    from ditskip_edge.models.views import full_model_forward
    with safe_open(eager_run["lora"], "pt") as fe, safe_open(et_run["lora"], "pt") as fr:
        assert set(fe.keys()) == set(fr.keys())
        assert fe.metadata() == fr.metadata()
        worst = max(_rel(fe.get_tensor(k), fr.get_tensor(k)) for k in fe.keys() if "lora_B" in k)
        assert worst < 1e-2       # 20 AdamW steps from the same init, losses within 1e-5 (loose: sign flips of tiny g)
    b = open_bundle(et_bundle)
    transformer = build_transformer(b.spec)
    x = torch.randn(1, 64, 64, generator=torch.Generator().manual_seed(0))
    t = torch.tensor([0.5])
    with torch.no_grad():
        base = full_model_forward("flux", transformer, x, t, b.cond)
        transformer.load_lora_adapter(str(Path(et_run["lora"]).parent), weight_name=Path(et_run["lora"]).name,
                                      prefix="transformer")
        tuned = full_model_forward("flux", transformer, x, t, b.cond)
    assert not torch.allclose(base, tuned)


def test_device_preprocessing_matches_host(et_bundle, et_run, tmp_path):
    """x0 computed by the preprocessing program from the bundle's photo is within 1% (relative L2) of the host's
    cached x0, and training on it gives the same losses to 1e-4 (the residuals were computed from the host's x0)."""
    from ditskip_edge.runtime.bundle import Bundle
    from ditskip_edge.runtime.executorch import Preprocessor
    from ditskip_edge.runtime.loop import RunConfig
    from ditskip_edge.runtime.run import train_bundle
    b = Bundle.open(et_bundle)
    pre, cache = Preprocessor(b), b.cache()
    for s in b.schedule.samples[:4]:
        host = cache.read_encoded(s.index)["x0"]
        dev = pre(s)
        assert np.linalg.norm(dev - host) <= 1e-2 * np.linalg.norm(host)
    run = train_bundle(et_bundle, "executorch", RunConfig(run_dir=tmp_path, steps=5, resume=False, progress=False),
                       device_preprocess=True)
    rel = np.abs(np.array(run["losses"]) - np.array(et_run["losses"][:5])) / np.abs(run["losses"])
    assert rel.max() <= 1e-4


def test_patch_sampling_program_matches_eager():
    from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer

    from ditskip_edge.patch_sampling import PatchSampler
    from ditskip_edge.runtime.schedule import crop_side_px, place_crop
    from export.executorch_preprocess import export_module
    h, w, out = 96, 80, 32
    sampler = PatchSampler(out)
    image = torch.rand(1, 3, h, w, generator=torch.Generator().manual_seed(0)) * 2 - 1
    et = export_module(sampler, (image, torch.tensor([0.0, 0.0, 48.0])))
    m = _load_for_executorch_from_buffer(et.buffer)
    rnd = np.random.default_rng(0)
    for _ in range(6):
        side, _ = crop_side_px(float(rnd.random()), out, 80, 16, min(h, w))
        box = torch.tensor([*place_crop(side, h, w, float(rnd.random()), float(rnd.random())), side],
                           dtype=torch.float32)
        ref = sampler(image, box)
        got = m.forward((image, box))[0]
        assert (got - ref).abs().max() <= 1e-5


def test_bundle_that_does_not_match_its_manifest_is_refused(et_bundle, tmp_path):
    from ditskip_edge.runtime.errors import BundleError
    for victim in ("programs/executorch/train_step_fp32.pte", "programs/executorch/train_step_fp32.ptd",
                   "subject/cache/shard_00000.bin"):
        copy = tmp_path / victim.replace("/", "_")
        shutil.copytree(et_bundle, copy, ignore=shutil.ignore_patterns("runs"))
        data = bytearray((copy / victim).read_bytes())
        data[len(data) // 2] ^= 0xFF
        (copy / victim).write_bytes(bytes(data))
        with pytest.raises(BundleError, match="SHA-256"):
            train_device(copy, "executorch", tmp_path / "run")


# ------------------------------------------------------------------ quantized storage, wider config

def _wide_flux_step(precision: str):
    """One FLUX double block at width 512 (8 heads x 64), no skip: enough weight mass for the size ratios."""
    from conftest import flux_step_module
    return flux_step_module(precision, heads=8, head_dim=64)


@pytest.fixture(scope="module")
def wide_programs():
    from ditskip_edge.quantize import QuantSpec
    from export.executorch_program import ExportConfig, export_training_program
    out = {}
    for precision in ("fp32", "int8", "int4"):
        step = _wide_flux_step(precision)
        out[precision] = (step, export_training_program(step, ExportConfig(quant=QuantSpec(precision))))
    return out


def test_quantized_programs_are_smaller_and_close(wide_programs):
    size = {p: len(prog.buffer) for p, (_, prog) in wide_programs.items()}
    assert size["fp32"] / size["int8"] >= 3.5, size
    assert size["fp32"] / size["int4"] >= 6.0, size
    loss = {}
    for precision, (step, prog) in wide_programs.items():
        loss[precision], _ = _check_program_matches_eager(prog.buffer, step.module, step.example)
    # stated error of the quantized model vs fp32 (same inputs, same LoRA): loss within 1% (int8), 5% (int4)
    assert abs(loss["int8"] - loss["fp32"]) <= 0.01 * loss["fp32"], loss
    assert abs(loss["int4"] - loss["fp32"]) <= 0.05 * loss["fp32"], loss


def test_arena_keeps_no_dequantized_weights_between_forward_and_backward(wide_programs):
    """int8 reads its codes as integers (issue 57: quantize.py multiplies the scale into the matmul's output, and
    graph_passes.transpose_before_cast transposes the int8 codes before their cast), so no dequantized weight is
    held from forward to backward whether or not the recompute pass runs (the arena is no larger than without it),
    and the arena is within half the largest dequantized weight of the traced need of the eager step (which reads
    the cast weight transposed as a view; the program copies the int8 codes transposed, a quarter weight). Measured
    7.66 MiB with and without the pass, traced need 6.17 (before issue 57: 12.7 with, 14.3 without, traced 12.8)."""
    from ditskip_edge.quantize import QuantSpec
    from export.executorch_program import ExportConfig, export_training_program
    step, prog = wide_programs["int8"]
    without = export_training_program(step, ExportConfig(quant=QuantSpec("int8", group_size=64),
                                                         recompute_frozen=False))
    saved = without.memory["planned_arena_bytes"] - prog.memory["planned_arena_bytes"]
    assert prog.passes["recompute_frozen"] > 0 and prog.passes["transpose_before_cast"] > 0
    assert saved >= 0, (saved, prog.memory)
    m = prog.memory
    assert m["planned_arena_bytes"] <= m["traced_equivalent_bytes"] + 0.5 * m["largest_dequantized_weight_bytes"], m


# ------------------------------------------------------------------ int8 codes in the XNNPACK program (issue 57)

@pytest.fixture(scope="module")
def xnnpack_int8_programs():
    """One small FLUX double block, int8, XNNPACK: the default program (casts run by
    XNNPACK, pow(x, 2) as x * x, the plain softmax), the program without those three passes (as before issue 57's
    speed work), and the default with the codes also stored transposed."""
    from conftest import flux_step_module
    from ditskip_edge.quantize import QuantSpec
    from export.executorch_program import ExportConfig, export_training_program
    step = flux_step_module("int8", heads=2, head_dim=32, rope=(4, 14, 14))
    base = ExportConfig(quant=QuantSpec("int8"), backend="xnnpack", external_weights=True,
                        trace_need=False)
    before = {"xnnpack_casts": False, "pow_as_mul": False, "plain_softmax": False}
    variants = {"default": base, "before": ExportConfig(**{**base.__dict__, **before}),
                "transposed_codes": ExportConfig(**{**base.__dict__, "transposed_codes": True}),
                "views_kept": ExportConfig(**{**base.__dict__, "constant_views_folded": False})}
    return step, {k: export_training_program(step, cfg) for k, cfg in variants.items()}


def test_speed_passes_keep_the_step_values(xnnpack_int8_programs):
    """The codes stored transposed (graph_passes.transposed_codes_as_constants, --transposed-codes) are exact: the
    default program's loss and gradients bit for bit. The default's passes (the int8 cast run by XNNPACK's convert:
    exact; x * x for pow(x, 2) and the plain softmax: rounding at most) keep loss and gradients within 1e-6 of the
    program without them (measured: equal), and the default program matches eager."""
    from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer

    from ditskip_edge.runtime.bindings import training_module
    step, progs = xnnpack_int8_programs
    out = {}
    for name, prog in progs.items():
        m = training_module(_load_for_executorch_from_buffer(prog.buffer,
                                                             data_map_buffer=next(iter(prog.data.values()))))
        loss = m.forward_backward("forward", step.example)[0]
        out[name] = (float(loss), {k: v.clone() for k, v in m.named_gradients().items()})
    loss, grads = out["default"]
    for exact in ("transposed_codes", "views_kept"):
        t_loss, t_grads = out[exact]
        assert t_loss == loss and all(torch.equal(t_grads[k], grads[k]) for k in grads), exact
    b_loss, b_grads = out["before"]
    assert abs(b_loss - loss) <= 1e-6 * abs(b_loss)
    assert max(_rel(b_grads[k], grads[k]) for k in grads) <= 1e-6
    prog = progs["default"]
    _check_program_matches_eager(prog.buffer, step.module, step.example, data=next(iter(prog.data.values())))


def test_int8_casts_and_transposes_run_in_xnnpack_and_transposed_codes_leave_none(xnnpack_int8_programs):
    """Default: every int8 -> fp32 cast of the codes is an XNNPACK delegate (none left to the portable kernels, whose
    loop was 27% of the 288M FLUX step) and so is every transpose of int8 codes (XNNPACK's int8 transpose; the
    portable permute_copy was 19%), no pow(x, 2) and no safe-softmax mask are left; --transposed-codes: no
    transpose of codes is left at all, the weights file holds the transposed codes beside the codes, and the
    planned arena does not grow."""
    _, progs = xnnpack_int8_programs
    default, portable, transposed = progs["default"], progs["before"], progs["transposed_codes"]
    assert default.passes["pow_as_mul"] > 0 and default.passes["safe_softmax"] > 0
    for op in ("logical_not", "any.dim", "where.self"):
        assert default.ops["portable_ops"].get(op, 0) < portable.ops["portable_ops"].get(op, 0), op
    n_casts, n_transposes = (default.passes["casts_as_dequantize"][k] for k in ("casts", "int8_transposes"))
    assert n_casts > 0 and n_transposes > 0
    assert "quantize_per_tensor" not in " ".join(default.ops["portable_ops"])
    casts = lambda p: p.ops["portable_ops"].get("dim_order_ops._to_dim_order_copy", 0)  # noqa: E731
    assert casts(portable) - casts(default) == n_casts
    permutes = lambda p: p.ops["portable_ops"].get("permute_copy", 0)  # noqa: E731
    assert permutes(portable) - permutes(default) == n_transposes
    assert transposed.passes["transposed_codes"] == n_transposes
    assert transposed.passes["casts_as_dequantize"]["int8_transposes"] == 0
    ptd = lambda p: sum(len(b) for b in p.data.values())  # noqa: E731
    assert ptd(default) < ptd(transposed) < 2 * ptd(default)
    assert transposed.memory["planned_arena_bytes"] <= default.memory["planned_arena_bytes"]


def test_constants_read_through_one_view_are_stored_in_its_shape_not_cloned_per_use(xnnpack_int8_programs):
    """graph_passes.constant_views_as_constants (ExportConfig.constant_views_folded, default): a frozen constant read
    only through views of one shape (int8 codes unsqueezed for a weight-left bmm, a scale [out, 1] squeezed) is
    stored in that shape, so the program no longer clones it before each view (edge_passes.constant_views_as_copies
    with external weights); the weights file keeps its size (the same bytes) and the step's values are the same bit
    for bit (test_speed_passes_keep_the_step_values)."""
    _, progs = xnnpack_int8_programs
    default, kept = progs["default"], progs["views_kept"]
    folded = default.passes["constant_views_as_constants"]
    assert folded > 0 and "constant_views_as_constants" not in kept.passes
    clones = lambda p: p.ops["portable_ops"].get("clone", 0)  # noqa: E731
    assert clones(kept) - clones(default) >= folded
    assert default.passes["constant_views_as_copies"] < kept.passes["constant_views_as_copies"]
    ptd = lambda p: sum(len(b) for b in p.data.values())  # noqa: E731
    assert abs(ptd(default) - ptd(kept)) <= 4096
    assert default.memory["planned_arena_bytes"] <= kept.memory["planned_arena_bytes"]


def test_compile_transposed_codes_flag_reaches_the_training_program_config():
    """`compile --transposed-codes` sets ExecutorchPrograms.transposed_codes (then ExportConfig's); it is refused for
    the portable program and without --runtime executorch."""
    from compiler.commands.compile import program_stages
    from ditskip_edge.runtime.errors import UserError
    assert program_stages(["executorch"], "int8", None, transposed_codes=True)[0].transposed_codes
    assert not program_stages(["executorch"], "int8", None)[0].transposed_codes
    with pytest.raises(UserError, match="transposed-codes"):
        program_stages(["executorch"], "int8", "portable", transposed_codes=True)
    with pytest.raises(UserError, match="transposed-codes"):
        program_stages(["ort"], "int8", None, transposed_codes=True)


def test_elementwise_option_delegates_only_large_cat_mul_add_and_keeps_values():
    """MatmulChainPartitioner(elementwise_min_numel=N) (ExportConfig.xnnpack_elementwise): one XNNPACK delegate per
    cat / mul / add with at least N output elements, the smaller ones left to the portable kernels; the same values
    bit for bit (a copy and one rounding each)."""
    from executorch.exir import EdgeCompileConfig
    from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer

    from export.lowering import to_edge_lowered
    from export.xnnpack_partition import MatmulChainPartitioner

    class M(torch.nn.Module):
        def forward(self, a, b, s):
            big = torch.cat([a * b + a, b], dim=0)          # [64, 64] products, [128, 64] cat
            small = s * s + s                                # [4]
            return big, small

    args = (torch.randn(64, 64), torch.randn(64, 64), torch.randn(4))
    ep = torch.export.export(M(), args)
    edge, _ = to_edge_lowered(ep, [MatmulChainPartitioner(elementwise_min_numel=1000)],
                              compile_config=EdgeCompileConfig(_check_ir_validity=False))
    gm = edge.exported_program().graph_module
    left = sorted(n.target.__name__.split(".")[1] for n in gm.graph.nodes
                  if n.op == "call_function" and n.target.__name__.startswith("aten."))
    assert left == ["add", "mul"], left                     # the small ones
    delegated = sum(1 for n in gm.graph.nodes if n.op == "call_function" and "call_delegate" in str(n.target))
    assert delegated == 3                                   # the large mul, add and cat
    out = _load_for_executorch_from_buffer(edge.to_executorch().buffer).forward(args)
    ref = M()(*args)
    assert torch.equal(out[0], ref[0]) and torch.equal(out[1], ref[1])
