"""The memory estimate: predictions from fake tensors match what eager allocates; the estimate command's contract
(and its old name `plan`, kept as an alias)."""

from __future__ import annotations

import json

import pytest

from compiler.cli import main
from ditskip_edge.models.specs import builtin_spec
from ditskip_edge.memory_estimate.memory import MemoryEstimate, program_preexisting, trace_step
from ditskip_edge.memory_estimate.program import StepConfig, build_step_program
from ditskip_edge.memory_estimate.split import split_for_ratio
from ditskip_edge.memory_estimate.tracker import SavedTensorBytes, StepMemoryTracker

TOLERANCE = 0.02   # fake-tensor prediction vs eager live-tensor bytes, relative


def _eager_step_bytes(cfg: StepConfig) -> dict:
    prog = build_step_program(cfg, device="cpu")
    pre = program_preexisting(prog)
    saved, tracker = SavedTensorBytes(pre), StepMemoryTracker(pre)
    with tracker:
        with saved():
            loss = prog.loss()
        loss.backward()
    return {"frozen": prog.frozen_bytes(), "lora": prog.lora_bytes(), "peak": tracker.peak_bytes,
            "saved": saved.bytes, "inputs": sum(prog.input_bytes().values())}


@pytest.mark.parametrize("model,precision", [("flux-tiny", "fp32"), ("flux-tiny", "int8"), ("sana-tiny", "int4")])
def test_predicted_weight_and_activation_bytes_match_eager(model, precision):
    spec = builtin_spec(model)
    cfg = StepConfig(spec, resolution_px=spec.train_px, text_tokens=8, n_front=1, n_back=2, rank=4, precision=precision)
    predicted = trace_step(cfg, attention="flash", count_flops=False)
    measured = _eager_step_bytes(cfg)
    assert predicted.frozen_weights_bytes == measured["frozen"]
    assert predicted.lora_params_bytes == measured["lora"]
    assert predicted.saved_activations_bytes == measured["saved"]
    assert abs(predicted.activation_arena_bytes / measured["peak"] - 1) <= TOLERANCE
    assert (predicted.cache_entry_bytes + predicted.text_conditioning_bytes + predicted.noise_bytes
            == measured["inputs"])


def test_quantized_weights_predict_less_frozen_memory_and_recompute_saves_no_weights():
    spec = builtin_spec("flux-tiny")
    base = dict(spec=spec, resolution_px=spec.train_px, text_tokens=8, n_front=1, n_back=2, rank=4)
    fp32, int8, int4 = (trace_step(StepConfig(**base, precision=p), count_flops=False) for p in ("fp32", "int8", "int4"))
    int8_saved = trace_step(StepConfig(**base, precision="int8", recompute_dequant=False), count_flops=False)
    assert fp32.frozen_weights_bytes > int8.frozen_weights_bytes > int4.frozen_weights_bytes
    # autograd keeping each dequantized weight costs about the fp32 kept linears again
    assert int8_saved.saved_activations_bytes > int8.saved_activations_bytes


def test_skipping_more_blocks_predicts_less_memory():
    spec = builtin_spec("sana-tiny")
    peaks = []
    for front, back in [(0, 0), (1, 1), (2, 1), (3, 2)]:
        tr = trace_step(StepConfig(spec, resolution_px=spec.train_px, text_tokens=8, n_front=front, n_back=back,
                                   rank=4, precision="int8"), attention="math", count_flops=False)
        peaks.append(MemoryEstimate.from_trace(tr, 0).peak_bytes)
    assert all(a > b for a, b in zip(peaks, peaks[1:])), peaks


def test_paper_splits_for_flux_and_a_documented_default_otherwise():
    assert (split_for_ratio(57, 0.5).n_front, split_for_ratio(57, 0.5).n_back) == (19, 10)
    assert (split_for_ratio(57, 0.3).n_front, split_for_ratio(57, 0.3).n_back) == (7, 10)
    assert (split_for_ratio(57, 0.4).n_front, split_for_ratio(57, 0.4).n_back) == (13, 10)
    p = split_for_ratio(20, 0.5)
    assert p.chosen_by == "default" and p.n_front + p.n_back == 10
    assert split_for_ratio(20, None, 3, 1).n_front == 3


@pytest.mark.parametrize("command", ["estimate", "plan"])
def test_estimate_json_prints_one_document_with_the_breakdown(capsys, command):
    rc = main([command, "--model", "sana-tiny", "--skip-front", "1", "--skip-back", "2", "--precision", "int8",
               "--resolution", "256", "--text-tokens", "8", "--rank", "4", "--weights", "resident", "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    mem = doc["memory"]
    parts = ["frozen_weights_bytes", "lora_params_bytes", "adamw_states_bytes", "gradient_sums_bytes",
             "activation_arena_bytes", "step_inputs_bytes", "runtime_overhead_bytes", "program_state_bytes",
             "program_inputs_bytes", "xnnpack_workspace_bytes"]
    assert mem["peak_bytes"] == mem["footprint_bytes"] == sum(mem[k] for k in parts)      # weights resident
    assert all(mem[k] > 0 for k in parts)
    assert mem["program_inputs_bytes"] == mem["step_inputs_bytes"]
    assert doc["plan"]["kept"] == [1, 4] and doc["storage"]["cache_bytes"] > 0


@pytest.mark.parametrize("argv,needle", [
    (["--model", "no-such-model", "--skip-ratio", "0.5"], "unknown model"),
    (["--model", "sana-tiny", "--skip-ratio", "1.5"], "skip ratio must be in (0, 1)"),
    (["--model", "sana-tiny", "--skip-ratio", "0.5", "--skip-front", "1"], "not both"),
    (["--model", "sana-tiny", "--skip-front", "3", "--skip-back", "3"], "leaves no kept block"),
    (["--model", "sana-tiny", "--skip-ratio", "0.5", "--resolution", "100"], "multiple of 32"),
    (["--model", "sana-tiny"], "--skip-ratio"),
    (["--model", "flux-tiny", "--skip-ratio", "0.5", "--generation-px", "128", "--attention-chunk", "-3"],
     "--attention-chunk -3"),
])
def test_bad_arguments_give_one_line_error(argv, needle, capsys):
    assert main(["estimate", *argv, "--json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and err[0].startswith("ditskip-edge estimate: error:")


def test_a_precision_outside_fp32_bf16_int8_int4_is_rejected_by_the_parser(capsys):
    with pytest.raises(SystemExit) as e:
        main(["estimate", "--model", "sana-tiny", "--skip-ratio", "0.5", "--precision", "int3"])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_flops_counted_on_fake_tensors_equal_a_count_on_real_tensors():
    from torch.utils.flop_counter import FlopCounterMode
    spec = builtin_spec("flux-tiny")
    cfg = StepConfig(spec, resolution_px=spec.train_px, text_tokens=8, n_front=1, n_back=2, rank=4)
    prog = build_step_program(cfg, device="cpu")
    counter = FlopCounterMode(display=False)
    with counter:
        prog.loss().backward()
    assert trace_step(cfg).flops == counter.get_total_flops() > 0


def test_block_remat_traces_a_smaller_arena_and_more_flops_and_segments_sit_between():
    spec = builtin_spec("flux-tiny")
    base = dict(spec=spec, resolution_px=spec.data_px, text_tokens=8, n_front=0, n_back=1, rank=4)
    plain = trace_step(StepConfig(**base), count_flops=False)
    blocks = trace_step(StepConfig(**base, remat="blocks"))
    pairs = trace_step(StepConfig(**base, remat="every:2"), count_flops=False)
    assert blocks.activation_arena_bytes < plain.activation_arena_bytes
    assert blocks.activation_arena_bytes <= pairs.activation_arena_bytes < plain.activation_arena_bytes
    assert blocks.flops > trace_step(StepConfig(**base)).flops      # the forward runs again in backward


def test_mapped_weights_leave_the_footprint_and_count_as_file_backed():
    from ditskip_edge.memory_estimate.request import EstimateRequest, estimate_memory
    req = dict(model="sana-tiny", skip_front=1, skip_back=2, precision="int8", text_tokens=8, rank=4)
    resident = estimate_memory(EstimateRequest(**req, weights="resident"))["memory"]
    mapped = estimate_memory(EstimateRequest(**req, weights="mapped"))["memory"]
    assert resident["file_backed_bytes"] == 0 and mapped["file_backed_bytes"] == resident["frozen_weights_bytes"] > 0
    assert mapped["footprint_bytes"] == resident["footprint_bytes"] - resident["frozen_weights_bytes"]
    assert 0 < mapped["file_backed_working_set_bytes"] < mapped["file_backed_bytes"]
    assert mapped["peak_bytes"] == mapped["footprint_bytes"] + mapped["file_backed_working_set_bytes"]


@pytest.mark.parametrize("remat", ["sometimes", "every:0", "every:x"])
def test_a_bad_remat_setting_is_one_line(remat, capsys):
    assert main(["estimate", "--model", "sana-tiny", "--skip-ratio", "0.5", "--remat", remat]) == 2
    assert "remat" in capsys.readouterr().err


@pytest.mark.parametrize("model", ["flux-tiny", "sana-tiny"])
def test_generation_holds_one_block_at_a_time_and_maps_the_whole_model(model):
    """Generation's estimate: the arena is the largest single program's (not the sum over blocks), the mapped weights
    are the whole model (skipped blocks too: more than training's kept span), the footprint is the larger of the
    transformer phase and the decoder's (which runs after the transformer programs are dropped), and a bigger image
    needs more."""
    from ditskip_edge.memory_estimate.request import EstimateRequest, estimate_memory
    spec = builtin_spec(model)
    doc = estimate_memory(EstimateRequest(model=model, skip_front=1, skip_back=2, precision="int8", rank=4,
                                          weights="mapped", generation_px=(spec.train_px, spec.data_px)))
    small, big = doc["generation"][str(spec.train_px)], doc["generation"][str(spec.data_px)]
    assert small["program_arena_bytes"] == max(small["arenas_bytes"].values()) > 0
    assert small["file_backed_bytes"] > doc["memory"]["file_backed_bytes"] > 0
    phase = small["program_arena_bytes"] + small["streams_bytes"] + small["latents_and_cond_bytes"]
    assert small["transformer_phase_bytes"] == phase
    assert small["decoder_bytes"] == small["decoder_arena_bytes"] + small["decoder_workspace_bytes"] > 0
    assert small["footprint_bytes"] == max(phase, small["decoder_bytes"]) + small["runtime_overhead_bytes"]
    assert big["decoder_arena_bytes"] > small["decoder_arena_bytes"]
    assert big["program_arena_bytes"] > small["program_arena_bytes"] and big["image_tokens"] > small["image_tokens"]
    assert small["within_training_footprint"] == (small["footprint_bytes"] <= doc["memory"]["footprint_bytes"])


@pytest.mark.parametrize("model,tile_px", [("flux-tiny", 64), ("sana-tiny", 128)])
def test_decoding_in_tiles_lowers_the_decode_phase_to_one_tiles_plus_the_picture(model, tile_px):
    """With --decode-tile-px the decoder's arena is one tile's (smaller than the whole picture's) and the phase adds
    what runtime/tiling.py holds: the picture and two rows of decoded tiles."""
    from ditskip_edge.memory_estimate.request import EstimateRequest, estimate_memory
    spec = builtin_spec(model)
    px = 2 * spec.data_px
    whole, tiled = (estimate_memory(EstimateRequest(model=model, skip_ratio=0.5, precision="int8", generation_px=(px,),
                                                    decode_tile_px=t))["generation"][str(px)] for t in (None, tile_px))
    assert whole["decode_tiling"]["tiling"]["tiled"] is False and tiled["decode_tiling"]["tiling"]["tiled"] is True
    assert tiled["decoder_arena_bytes"] < whole["decoder_arena_bytes"] / 2
    rows = len(range(0, px // spec.vae_scale_factor, tiled["decode_tiling"]["tiling"]["stride_latent"]))
    held = (3 * px * px + 2 * rows * 3 * tile_px ** 2) * 4
    assert tiled["decoder_bytes"] == tiled["decoder_arena_bytes"] + tiled["decoder_workspace_bytes"] + held
    assert tiled["transformer_phase_bytes"] == whole["transformer_phase_bytes"]


@pytest.mark.parametrize("backend", [None, "portable", "xnnpack"])
def test_tracker_counts_the_exported_programs_transposed_weight_copy(backend):
    """Eager torch multiplies by a transposed weight view in place; a portable program copies w.t() for the
    forward's matmul, an XNNPACK program (weights on the left, export/graph_passes.mm_to_bmm) for the backward's:
    the tracker adds that weight-sized transient where the program has it, and only there."""
    import torch
    from ditskip_edge.memory_estimate.tracker import StepMemoryTracker, storage_keys
    lin = torch.nn.Linear(64, 256, bias=False)
    lin.weight.requires_grad_(False)
    x = torch.randn(4, 64, requires_grad=True)
    seen = {}
    for phase in ("forward", "backward"):
        seen[phase] = StepMemoryTracker(storage_keys([lin.weight, x]), weight_transposes=backend)
    with seen["forward"]:
        y = lin(x)
    with seen["backward"]:
        y.sum().backward()
    weight_bytes = 256 * 64 * 4
    expect = {None: (0, 0), "portable": (weight_bytes, 0), "xnnpack": (0, weight_bytes)}[backend]
    assert (seen["forward"].transpose_peak_bytes, seen["backward"].transpose_peak_bytes) == expect


def test_tracker_counts_the_delegates_an_xnnpack_program_has_for_a_frozen_linear():
    """x @ w.t() becomes (w @ x.t()).t() in the program: x.t(), the product and the output transpose are three
    delegates; the input gradient g @ w becomes (w.t() @ g.t()).t(): four (export/graph_passes.mm_to_bmm)."""
    import torch
    from ditskip_edge.memory_estimate.tracker import StepMemoryTracker, storage_keys
    lin = torch.nn.Linear(64, 256, bias=False)
    lin.weight.requires_grad_(False)
    x = torch.randn(4, 64, requires_grad=True)
    fwd = StepMemoryTracker(storage_keys([lin.weight, x]), weight_transposes="xnnpack")
    bwd = StepMemoryTracker(storage_keys([lin.weight, x]), weight_transposes="xnnpack")
    with fwd:
        y = lin(x)
    with bwd:
        y.sum().backward()
    assert (fwd.xnnpack_delegates, bwd.xnnpack_delegates) == (3, 4)
    assert fwd.kernel_calls >= 1 and bwd.kernel_calls >= 1


def test_program_state_is_counted_for_a_program_and_not_for_eager_torch():
    from ditskip_edge.memory_estimate.memory import MemoryEstimate, program_state_bytes
    spec = builtin_spec("flux-tiny")
    cfg = StepConfig(spec=spec, resolution_px=spec.train_px, text_tokens=8, n_front=0, n_back=1, rank=4)
    eager = trace_step(cfg, attention="math", count_flops=False)
    program = trace_step(cfg, attention="math", count_flops=False, backend="xnnpack")
    assert program.xnnpack_delegates > 0 and program.kernel_calls > program.xnnpack_delegates
    e, p = MemoryEstimate.from_trace(eager, 0), MemoryEstimate.from_trace(program, 0)
    assert e.program_state_bytes == 0
    assert p.program_state_bytes == program_state_bytes(program.kernel_calls, program.xnnpack_delegates) > 0
    counted = MemoryEstimate.from_trace(program, 0, program={"instructions": 1000, "xnnpack_delegates": 400})
    assert counted.program_state_bytes == program_state_bytes(1000, 400)
    assert counted.footprint_bytes - p.footprint_bytes == counted.program_state_bytes - p.program_state_bytes


def test_requests_differing_only_outside_the_training_step_trace_it_once(monkeypatch):
    """request.traced_step: the subject stage's and the weights' options leave the traced step as it is (one trace,
    the same training numbers); a different precision or backend is another step, traced anew."""
    from ditskip_edge.memory_estimate import request
    calls = []
    real = request.trace_step

    def counting(cfg, **kw):
        calls.append((cfg.precision, kw["backend"]))
        return real(cfg, **kw)
    monkeypatch.setattr(request, "trace_step", counting)
    monkeypatch.setattr(request, "_TRACED_STEPS", {})
    base = dict(model="flux-tiny", skip_ratio=0.5, precision="int8")
    first = request.estimate_memory(request.EstimateRequest(**base))
    again = request.estimate_memory(request.EstimateRequest(**base, weights="resident", subject_stage=True))
    assert calls == [("int8", "xnnpack")]                  # compile's default backend (ditskip_edge/backends.py)
    assert first["activation_detail"] == again["activation_detail"] and first["params"] == again["params"]
    request.estimate_memory(request.EstimateRequest(**{**base, "precision": "int4"}))
    request.estimate_memory(request.EstimateRequest(**base, backend="portable"))
    assert calls == [("int8", "xnnpack"), ("int4", "xnnpack"), ("int8", "portable")]


def test_encode_tiles_with_the_portable_encoder_bring_sana_1600ms_subject_stage_below_training():
    """memory_estimate/subject.py (compile --encode-tile-px / --encode-stages / --encode-backend): SANA-1600M's subject
    stage is above training's footprint with DC-AE's encoder on the whole 512-px crop; 256-px tiles cut the encoder's
    peak below half, but XNNPACK's packed copy of the encoder's weights (anonymous, mapped data file or not: measured
    in benchmarks/results/encode_tiles.md) and its program's arena and workspace (xnnpack_program.py) keep the stage
    above training, one encoder stage at a time too (its largest stage under half the weights, but stage 0's 256-px
    features: measured at real size, 407.9 MiB against training's 295.9, benchmarks/results/real_scale.md); tiles with
    the portable encoder (mapped weights read in place) bring it below, and the estimate suggests that.
    FLUX.1-dev's 256-px crops are one tile (no suggestion; --encode-tile-px 256 changes nothing) and its stage is below
    training as it is."""
    from ditskip_edge.memory_estimate.request import EstimateRequest, estimate_memory
    req = dict(skip_ratio=0.5, precision="int8", weights="mapped", subject_stage=True)
    whole = estimate_memory(EstimateRequest(model="sana-1600m", **req))
    tiled = estimate_memory(EstimateRequest(model="sana-1600m", encode_tile_px=256, **req))
    lean = estimate_memory(EstimateRequest(model="sana-1600m", encode_tile_px=256, encode_backend="portable", **req))
    staged = estimate_memory(EstimateRequest(model="sana-1600m", encode_tile_px=256, encode_stages=True, **req))
    train = whole["memory"]["footprint_bytes"]
    w, t, p, st = whole["subject_stage"], tiled["subject_stage"], lean["subject_stage"], staged["subject_stage"]
    assert w["footprint_bytes"] > t["footprint_bytes"] > st["footprint_bytes"] > train >= p["footprint_bytes"]
    assert not any(s["no_larger_than_training"] for s in (w, t, st)) and p["no_larger_than_training"]
    assert t["encoder_anonymous_weights_bytes"] == t["encoder_weights_bytes"] > 0 == p["encoder_anonymous_weights_bytes"]
    stages = st["encode_stages"]
    assert stages["stages"] == 6 and st["encoder_anonymous_weights_bytes"] == stages["largest_stage_weights_bytes"]
    assert 0 < stages["largest_stage_weights_bytes"] < t["encoder_weights_bytes"] / 2
    assert sum(r["weights_bytes"] for r in stages["stage_rows"]) == t["encoder_weights_bytes"]
    tiles = t["encode_tiles"]
    assert tiles["tiled"] and tiles["tiles"] == 9 and len(tiles["tile_shapes"]) == 4
    assert tiles["encoder_tile_portable_arena_bytes"] < w["encoder_forward_peak_bytes"] / 2
    for s in (w, t):
        assert s["encode_tiles_suggested"]["flag"] == "--encode-tile-px 256 --encode-backend portable"
        assert s["encode_tiles_suggested"]["footprint_bytes"] == p["footprint_bytes"]
    assert st["encode_tiles_suggested"]["flag"] == "--encode-tile-px 256 --encode-stages --encode-backend portable"
    assert st["encode_tiles_suggested"]["footprint_bytes"] <= train
    assert p["encode_tiles_suggested"] is None
    flux = estimate_memory(EstimateRequest(model="flux-dev", **req))
    flux_tiled = estimate_memory(EstimateRequest(model="flux-dev", encode_tile_px=256, **req))
    assert flux["subject_stage"]["encode_tiles_suggested"] is None and flux_tiled["subject_stage"]["encode_tiles"] is None
    assert flux_tiled["subject_stage"]["footprint_bytes"] == flux["subject_stage"]["footprint_bytes"]
    assert flux["subject_stage"]["no_larger_than_training"]


def test_the_estimate_traces_each_encoder_tile_shape_once_suggestion_included(monkeypatch):
    """memory_estimate/subject.py subject_stage_estimate: SANA-1600M on 256-px tiles is above training, so the
    estimate also weighs tiles + stages for its suggestion; the tiles' encoder (4 tile shapes) is traced once per
    shape, not again for each option it weighs (it was three times)."""
    from collections import Counter
    from ditskip_edge.memory_estimate import subject
    from ditskip_edge.memory_estimate.request import EstimateRequest, estimate_memory
    calls = Counter()
    real = subject._trace_encoder

    def counted(spec, height_px, width_px=None):
        calls[(height_px, width_px or height_px)] += 1
        return real(spec, height_px, width_px)
    monkeypatch.setattr(subject, "_trace_encoder", counted)
    est = estimate_memory(EstimateRequest(model="sana-1600m", skip_ratio=0.5, precision="int8", weights="mapped",
                                          subject_stage=True, encode_tile_px=256))
    assert est["subject_stage"]["encode_tiles_suggested"]["flag"] == "--encode-tile-px 256 --encode-backend portable"
    tile_calls = {hw: n for hw, n in calls.items() if hw != (512, 512)}
    assert len(tile_calls) == 4 and set(tile_calls.values()) == {1}


def test_estimate_states_flops_and_a_time_from_stated_throughputs():
    """issue 57: the training step's FLOPs per sample, a generated picture's (sampler steps x guidance branches x the
    whole transformer + the decoder), and times from the stated throughputs (timing.py), labelled an estimate."""
    from ditskip_edge.memory_estimate import timing
    from ditskip_edge.memory_estimate.request import EstimateRequest, estimate_memory
    doc = estimate_memory(EstimateRequest(model="flux-tiny", skip_ratio=0.5, generation_px=(128,), generation_steps=10,
                                          steps=50, grad_accum=2, phone_gflops=10.0))
    t = doc["time"]
    g = doc["generation"]["128"]
    assert t["estimate"] is True and t["samples"] == 100
    assert t["flops"]["training"] == 100 * doc["flops_per_sample"] > 0
    assert g["flops_per_picture"] == 10 * g["flops_per_sampler_step"] + g["decoder_flops"] > 0
    assert t["flops"]["picture"] == g["flops_per_picture"] and t["flops"]["subject_stage"] is None
    assert t["phone"]["gemm_gflops"] == 10.0 and t["phone"]["source"] == "--phone-gflops"
    if timing.HOST_GEMM_GFLOPS:
        phone = 10.0 * timing.host_efficiency()
        assert abs(t["phone"]["training_minutes"] - t["flops"]["training"] / (phone * 1e9) / 60) < 0.01
        # a picture: the transformer's programs at the XNNPACK program's throughput, the decoder at its own program's
        # (compile's default: the XNNPACK decode program, benchmarks/results/decode_tiles.md)
        assert t["decoder_backend"] == g["decode_tiling"]["backend"] == "xnnpack"
        decode = 10.0 * timing.host_efficiency(program="decode")
        want = ((g["flops_per_picture"] - g["decoder_flops"]) / phone + g["decoder_flops"] / decode) / 1e9 / 60
        assert abs(t["phone"]["picture_minutes"] - want) < 0.01


def _traced(module_fn, backend, *tensors):
    import torch
    from ditskip_edge.memory_estimate.tracker import StepMemoryTracker, storage_keys
    t = StepMemoryTracker(storage_keys(tensors), weight_transposes=backend)
    with t:
        module_fn().sum().backward()
    return t


def test_xnnpack_workspace_packs_the_activations_of_a_weight_matmul_and_the_weight_of_a_strided_one():
    """mm_to_bmm puts a weight on the left: XNNPACK packs the activations (the smaller operand) into its shared
    workspace. A non-contiguous 3-D input times a 2-D weight runs as bmm on the expanded w.t(): the weight is the
    packed operand (SANA's layout: 1152 x 1152 fp32, the 5.31 MB heaptrack shows), and the program writes the
    strided operand out first (expand_copy), a weight-sized transient. Eager torch and portable programs have no
    workspace."""
    import torch
    w = torch.randn(256, 64)
    x = torch.randn(4, 64, requires_grad=True)
    plain = _traced(lambda: x @ w.t(), "xnnpack", w, x)
    assert plain.workspace_bytes == 4 * 256 * 4 and plain.expand_peak_bytes == 0     # g [4, 256] in backward
    xt = torch.randn(1, 64, 4, requires_grad=True)
    strided = _traced(lambda: torch.matmul(xt.transpose(1, 2), w.t()), "xnnpack", w, xt)
    assert strided.workspace_bytes == 256 * 64 * 4 and strided.expand_peak_bytes >= 256 * 64 * 4
    for backend in (None, "portable"):
        assert _traced(lambda: x @ w.t(), backend, w, x).workspace_bytes == 0


def test_a_programs_dequantization_reads_a_copy_of_the_integer_codes_beside_the_fp32_weight():
    """The program transposes or views int8 codes before their cast (transpose_before_cast; a view of a constant
    reads a clone of it, edge_passes.constant_views_as_copies): the codes' bytes are live with the fp32 weight,
    which eager torch does not hold."""
    import torch
    from ditskip_edge.quantize import QuantLinear, QuantSpec
    lin = QuantLinear(torch.nn.Linear(64, 512, bias=False), QuantSpec("int8", recompute_in_backward=True))
    x = torch.randn(2, 64, requires_grad=True)
    frozen = [*lin.buffers(), x]
    eager = _traced(lambda: lin(x), None, *frozen)
    program = _traced(lambda: lin(x), "xnnpack", *frozen)
    assert eager.codes_copy_peak_bytes == 0 and program.codes_copy_peak_bytes == 512 * 64
    assert eager.peak_bytes < program.peak_bytes <= eager.peak_bytes + 512 * 64


def test_an_exported_programs_estimate_holds_its_input_buffers_and_xnnpacks_workspace():
    """The runtime's step inputs are copied into the program's planned input buffers (a second copy); an XNNPACK
    program adds its workspace; eager torch neither."""
    from ditskip_edge.memory_estimate.memory import MemoryEstimate
    spec = builtin_spec("sana-tiny")
    cfg = StepConfig(spec=spec, resolution_px=spec.train_px, text_tokens=8, n_front=1, n_back=1, rank=4,
                     precision="int8", remat="blocks")
    eager = MemoryEstimate.from_trace(trace_step(cfg, attention="math", count_flops=False), 0)
    program = MemoryEstimate.from_trace(trace_step(cfg, attention="math", count_flops=False, backend="xnnpack"), 0)
    assert eager.program_inputs_bytes == eager.xnnpack_workspace_bytes == 0
    assert program.program_inputs_bytes == program.step_inputs_bytes > 0
    assert program.xnnpack_workspace_bytes > 0
    parts = ("frozen_weights_bytes", "lora_params_bytes", "adamw_states_bytes", "gradient_sums_bytes",
             "activation_arena_bytes", "step_inputs_bytes", "runtime_overhead_bytes", "program_state_bytes",
             "program_inputs_bytes", "xnnpack_workspace_bytes")
    assert program.footprint_bytes == sum(getattr(program, k) for k in parts)      # weights resident


def test_graph_lifetimes_free_a_tensor_after_its_last_reader_not_when_python_drops_it():
    """Eager torch keeps an intermediate as long as Python references it (a local of the module's forward); the
    exported program's memory plan frees it after its last reader: graph_peak_bytes counts the latter."""
    import torch
    from ditskip_edge.memory_estimate.tracker import StepMemoryTracker
    x = torch.randn(256, 256)
    tracker = StepMemoryTracker({x.untyped_storage()._cdata})
    with tracker:
        a = x * 2                    # read once, by b, but referenced until the end
        b = a + 1
        c = b * 3
        d = c + 1
    del a, b, c
    one = 256 * 256 * 4
    assert tracker.peak_bytes == 4 * one          # a, b, c, d all referenced at the end
    assert tracker.graph_peak_bytes() == 2 * one      # each freed after its reader: two at once, d included


def test_the_subject_stage_holds_every_photo_at_its_normalised_size(tmp_path):
    """The runtime decodes every photo before the first sample and holds them (fp32, short side at most s_max):
    the estimate counts them all, from the folder's photo sizes or as `subject_photos` photos of s_max x s_max."""
    from PIL import Image
    from ditskip_edge.memory_estimate.subject import photo_sizes_of
    Image.new("RGB", (600, 400)).save(tmp_path / "a.png")
    Image.new("RGB", (100, 120)).save(tmp_path / "b.png")
    assert photo_sizes_of(tmp_path, 256) == [(256, 384), (120, 100)]
    base = dict(model="sana-tiny", skip_front=1, skip_back=1, precision="int8", resolution_px=256, text_tokens=8,
                rank=4, subject_stage=True, runtime_overhead_mib=0)
    from ditskip_edge.memory_estimate.request import EstimateRequest, estimate_memory
    spec = builtin_spec("sana-tiny")
    two = estimate_memory(EstimateRequest(**base, subject_photos=2))["subject_stage"]
    five = estimate_memory(EstimateRequest(**base, subject_photos=5))["subject_stage"]
    sized = estimate_memory(EstimateRequest(**base, photo_sizes=((256, 384), (120, 100))))["subject_stage"]
    one = 3 * spec.data_px * spec.data_px * 4
    assert (two["photo_bytes"], five["photo_bytes"]) == (2 * one, 5 * one)
    assert five["footprint_bytes"] - two["footprint_bytes"] == 3 * one
    assert sized["photo_bytes"] == 3 * 4 * (256 * 384 + 120 * 100) and sized["photos"] == 2
