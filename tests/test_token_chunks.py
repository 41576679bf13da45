"""FLUX blocks' MLPs in token chunks (models/token_chunks.py, compile / estimate --mlp-chunk).

Properties protected:
- a FLUX block (double and single) with its MLPs in token chunks gives the unchunked block's outputs up to the
  matmuls' rounding (eager and as the exported XNNPACK generation program: within 1e-5 absolute, outputs of order 1),
  keeps every state's name (the block program's inputs are the same), and leaves the block as it was on exit;
- the chunked single-block program plans a smaller arena than the unchunked one at the same token count (the memory
  plan reuses one chunk's buffers for the next), and the estimate's trace of FLUX.1-dev's blocks at 1024 px shrinks
  with it;
- when generation does not fit training's footprint the estimate advises compile flags with --mlp-chunk, and
  estimating with them gives the footprint the advice states;
- a bundle compiled with --mlp-chunk records it in the manifest and its picture still equals diffusers' (Python
  runtime) and the native core draws the Python runtime's picture (neither runtime changed: the programs' inputs and
  outputs are the same);
- a bad chunk is refused with one line by estimate and compile.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from conftest import compile_tiny

PROMPT = "a photo of sks toy"
ATOL = 1e-5


def _block(kind: str):
    """A FLUX block at int8 as generation exports it (every state lifted), 256 image + 8 text tokens of width 64, one
    head: flux-tiny's layout made wider so its MLP, not its weights or scores, is the largest activation (as at
    FLUX.1-dev's 1024 px: 4,608 tokens of width 3,072)."""
    from diffusers.models.transformers.transformer_flux import FluxSingleTransformerBlock, FluxTransformerBlock
    from ditskip_edge.quantize import QuantSpec, quantize_frozen_layers
    from export.generation_modules import LiftedBlock, block_states
    torch.manual_seed(0)
    block = (FluxTransformerBlock if kind == "double" else FluxSingleTransformerBlock)(64, 1, 64).eval()
    quantize_frozen_layers(block.requires_grad_(False), QuantSpec("int8"))
    names = sorted(block_states(block))
    g = torch.Generator().manual_seed(1)
    acts = (torch.randn(1, 256, 64, generator=g), torch.randn(1, 8, 64, generator=g), torch.randn(1, 64, generator=g),
            torch.randn(264, 64, generator=g).cos(), torch.randn(264, 64, generator=g).sin())
    lifted = LiftedBlock(SimpleNamespace(arch="flux"), block, (32, 32), names)      # FLUX's: reads view.arch only
    return block, lifted, acts + tuple(block_states(block)[k].detach() for k in names)


@pytest.mark.parametrize("kind", ["double", "single"])
def test_mlp_in_token_chunks_computes_the_same_block_and_keeps_its_states_names(kind):
    from ditskip_edge.models.token_chunks import chunked_mlp
    from export.generation_modules import block_states
    block, lifted, example = _block(kind)
    names, forwards = sorted(block_states(block)), {n: m.forward for n, m in block.named_modules()}
    with torch.no_grad():
        want = lifted(*example)
        for chunk in (96, 264, 1000):          # a ragged last chunk, one chunk of all tokens, a chunk larger than all
            with chunked_mlp(block, chunk):
                assert sorted(block_states(block)) == names                   # the program's inputs are the same
                got = lifted(*example)
            assert all(torch.allclose(a, b, atol=ATOL) for a, b in zip(got, want)), chunk
    assert {n: m.forward for n, m in block.named_modules()} == forwards                   # restored on exit


def test_the_single_block_program_with_mlp_chunks_plans_a_smaller_arena_and_computes_the_same():
    """The exported XNNPACK program (export_module_program as generation_stage.py lowers a block): the memory plan
    reuses one chunk's buffers for the next (lifetimes end), so the arena shrinks."""
    from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer
    from ditskip_edge.models.token_chunks import chunked_mlp
    from export.executorch_preprocess import export_module_program
    block, lifted, example = _block("single")
    with torch.no_grad():
        want = lifted(*example)
    arenas = {}
    for chunk in (None, 96):                                           # 264 tokens: 3 chunks
        with chunked_mlp(block, chunk), torch.no_grad():
            pte, memory = export_module_program(lifted, example, "xnnpack", planned_inputs=False, mm_rewrite=True,
                                                matmuls=True)
        arenas[chunk] = memory["planned_arena_bytes"]
        got = _load_for_executorch_from_buffer(pte).forward(list(example))
        assert all(torch.allclose(g, w, atol=ATOL) for g, w in zip(got, want)), chunk
    assert arenas[96] < 0.9 * arenas[None], arenas                    # measured: 1,039,696 vs 1,242,448 bytes


def test_the_estimates_trace_of_flux_dev_blocks_at_1024_px_shrinks_with_the_mlp_chunk():
    """memory_estimate/generation.py traces the blocks under the same chunked_mlp (meta weights, fake tensors): at
    FLUX.1-dev's 1024 px (4,608 tokens) both block kinds' arenas shrink; embed and head are not blocks."""
    from ditskip_edge.memory_estimate.generation import GenerationConfig, trace_generation
    from ditskip_edge.models.loading import resolve_spec
    spec = resolve_spec("flux-dev")
    arenas = {c: trace_generation(GenerationConfig(spec, 1024, spec.text.seq_len, "int8", attention_chunk=256,
                                                   mlp_chunk=c))["arenas_bytes"] for c in (None, 1024)}
    for kind in ("block.double", "block.single"):
        assert arenas[1024][kind] < 0.9 * arenas[None][kind], arenas
    assert (arenas[1024]["embed"], arenas[1024]["head"]) == (arenas[None]["embed"], arenas[None]["head"])


def test_estimate_advises_the_chunk_flags_when_generation_does_not_fit_and_they_give_what_it_says():
    """flux-tiny at 512 px: generation above training's footprint; the advice names --mlp-chunk among compile's
    flags, and estimating with those flags gives the advice's footprint, lower than without them."""
    from ditskip_edge.memory_estimate.request import EstimateRequest, estimate_memory
    req = EstimateRequest(model="flux-tiny", skip_ratio=0.5, generation_px=(512,))
    g = estimate_memory(req)["generation"]["512"]
    assert not g["within_training_footprint"]
    advice = g["advice"]
    flags = dict(zip(advice["compile_flags"].split()[::2], map(int, advice["compile_flags"].split()[1::2])))
    assert "--mlp-chunk" in flags and advice["footprint_bytes"] < g["footprint_bytes"]
    again = estimate_memory(EstimateRequest(model="flux-tiny", skip_ratio=0.5, generation_px=(512,),
                                            **{k.removeprefix("--").replace("-", "_"): v for k, v in flags.items()}))
    assert again["generation"]["512"]["footprint_bytes"] == advice["footprint_bytes"]


@pytest.fixture(scope="module")
def chunked_bundle(tmp_path_factory):
    from export.generation_stage import GenerationPrograms
    return compile_tiny(tmp_path_factory.mktemp("gen-chunks") / "bundle", "flux-tiny", steps=2,
                        programs=[GenerationPrograms(("fp32",), steps=3, mlp_chunk=128)])


def test_a_bundle_with_mlp_chunks_draws_diffusers_picture(chunked_bundle, tmp_path):
    from ditskip_edge.runtime.bundle import read_manifest
    from test_generation import TOLERANCE, _reference, _run, random_lora
    gen = read_manifest(chunked_bundle, verify=False)["generation"]
    assert (gen["mlp_chunk"], gen["attention_chunk"]) == (128, None)   # 264 tokens: 3 chunks; 256 images: 2
    lora = random_lora(chunked_bundle, tmp_path / "lora")
    got = _run(chunked_bundle, "fp32", lora)
    mae = float(np.abs(got - _reference(chunked_bundle, lora)).mean())
    assert mae <= TOLERANCE, mae


@pytest.mark.parametrize("command", ["estimate", "compile"])
def test_a_bad_mlp_chunk_is_refused_with_one_line(command, tmp_path, capsys):
    from compiler.cli import main
    argv = (["estimate", "--model", "flux-tiny", "--skip-ratio", "0.5", "--generation-px", "128"]
            if command == "estimate" else
            ["compile", "--model", "flux-tiny", "--skip-ratio", "0.5", "--out", str(tmp_path / "b"), "--prompt",
             PROMPT, "--generation"])
    assert main([*argv, "--mlp-chunk", "0", "--json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--mlp-chunk 0: expected a positive number of tokens" in err[0], err
    assert not (tmp_path / "b").exists()


def test_the_native_runtime_draws_the_python_runtimes_picture_of_a_bundle_with_mlp_chunks(runner, chunked_bundle,
                                                                                          tmp_path):
    """The native core runs the chunked programs unchanged (same inputs and outputs): test_native_generate.py's
    comparison (float image within 1e-5, PNG pixels and summary equal)."""
    from test_native_generate import _same_picture
    _same_picture(runner, chunked_bundle, tmp_path, "fp32", 3, 2, 3.0)
