"""Shared fixtures. The repo root goes first on sys.path so a git worktree tests its own code."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs one worker process per core: each gets one torch / OpenMP thread (set before torch is first
    # imported, and inherited by the tests' subprocesses); two threads per worker on 2 cores spin in OpenMP barriers.
    os.environ.setdefault("OMP_NUM_THREADS", "1")

PHOTOS = ROOT / "examples" / "photos"


@pytest.fixture(scope="session", autouse=True)
def program_cache_of_this_run(tmp_path_factory) -> Iterator[Path]:
    """One program cache (export/program_cache.py) for the whole run, shared by the worker processes and the tests'
    subprocesses, empty at its start: a program two tests export alike is lowered once (the suite exports the same
    training step for several bundles), and nothing is read from, or left in, the user's own cache."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "program_cache"
    before = os.environ.get("DITSKIP_EDGE_PROGRAM_CACHE")
    os.environ["DITSKIP_EDGE_PROGRAM_CACHE"] = str(folder)
    yield folder
    if before is None:
        os.environ.pop("DITSKIP_EDGE_PROGRAM_CACHE", None)
    else:
        os.environ["DITSKIP_EDGE_PROGRAM_CACHE"] = before


# SANA's published DC-AE structure (ResBlock x 3, EfficientViT x 3 with multiscale linear attention, pixel-shuffle
# blocks with shortcuts) at tiny channels: tiny_dc_ae's config
TINY_DC_AE_CONFIG = dict(in_channels=3, latent_channels=8, attention_head_dim=8,
                         encoder_block_types=["ResBlock"] * 3 + ["EfficientViTBlock"] * 3,
                         decoder_block_types=["ResBlock"] * 3 + ["EfficientViTBlock"] * 3,
                         encoder_block_out_channels=[8, 16, 16, 16, 32, 32],
                         decoder_block_out_channels=[8, 16, 16, 16, 32, 32],
                         encoder_layers_per_block=[1] * 6, decoder_layers_per_block=[1] * 6,
                         encoder_qkv_multiscales=[[], [], [], [5], [5], [5]],
                         decoder_qkv_multiscales=[[], [], [], [5], [5], [5]], scaling_factor=0.41407)


def tiny_dc_ae():
    """An AutoencoderDC built like SANA's published f32c32 (ResBlock x 3, EfficientViT x 3 with multiscale attention,
    pixel-unshuffle down blocks with shortcuts) with tiny channels, random weights (seed 0), in eval mode."""
    import torch
    from diffusers import AutoencoderDC
    torch.manual_seed(0)
    return AutoencoderDC.from_config(TINY_DC_AE_CONFIG).eval()


def flux_step_module(precision: str, heads: int, head_dim: int, single_layers: int = 0, rope=(8, 28, 28)):
    """The export tests' training step (export.step_module.StepModule): FLUX with one double block (+ single_layers
    single blocks) of heads x head_dim width, no skip, LoRA rank 4 on every block with random B (a zero B makes every
    lora_A gradient zero), frozen weights quantized to `precision`, the inputs of one sample at t = 0.6. Seeded: the
    same module on every call. rope: the rotary axes' dims (they sum to head_dim)."""
    import torch
    from diffusers import FluxTransformer2DModel

    from ditskip_edge.cache.codecs import decoder_for
    from ditskip_edge.lora import LoraSpec, add_lora
    from ditskip_edge.models.views import make_view
    from ditskip_edge.plan import SkipPlan
    from ditskip_edge.quantize import QuantSpec, quantize_frozen_layers
    from ditskip_edge.skip_model import SkipModel
    from ditskip_edge.training_step import TrainingStep
    from export.step_module import FlatTrainingStep, StepModule, flatten_step_inputs, program_lora_keys
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    tr = FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=single_layers,
                                attention_head_dim=head_dim, num_attention_heads=heads, joint_attention_dim=32,
                                pooled_projection_dim=32, guidance_embeds=False, axes_dims_rope=list(rope)).eval()
    with torch.no_grad():
        for p in tr.parameters():
            if p.abs().sum() == 0:
                p.normal_(0, 0.02, generator=g)
    blocks = ["transformer_blocks.0"] + [f"single_transformer_blocks.{i}" for i in range(single_layers)]
    add_lora(tr, "flux", blocks, LoraSpec(rank=4, alpha=4.0))
    with torch.no_grad():
        for n, p in tr.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    skip = SkipModel(make_view("flux", tr, list(range(len(blocks)))), SkipPlan(len(blocks), 0, 0))
    n_q = quantize_frozen_layers(skip.view, QuantSpec(precision))
    g = torch.Generator().manual_seed(1)
    x0, noise = torch.randn(1, 4, 8, 8, generator=g), torch.randn(1, 4, 8, 8, generator=g)
    cond = {"txt": torch.randn(1, 4, 32, generator=g), "pooled": torch.randn(1, 32, generator=g)}
    names, example = flatten_step_inputs(x0, noise, torch.tensor([0.6]), cond, {})
    flat = FlatTrainingStep(TrainingStep(skip, decoder_for("fp32", {})), names)
    return StepModule(flat, names, example, program_lora_keys(flat, tr), tr, n_q)


def compile_tiny(out: Path, model: str = "flux-tiny", n_front: int = 1, n_back: int = 2, steps: int = 6,
                 grad_accum: int = 1, **kw) -> Path:
    """A tiny bundle through the compiler's API. kw: CompileRequest fields (programs=[ExecutorchPrograms(...)],
    cache_codec, optimizer, ...), and seed / images / prompt (images=None: a model bundle)."""
    from compiler.compile import CompileRequest, compile_bundle
    from ditskip_edge.lora import LoraSpec
    from ditskip_edge.models.loading import resolve_spec
    from ditskip_edge.runtime.bundle import OptimizerSpec
    from ditskip_edge.runtime.schedule import ScheduleConfig
    spec = resolve_spec(model)
    sched = ScheduleConfig(steps=steps, grad_accum=grad_accum, s_min_px=spec.train_px, s_max_px=spec.data_px,
                           multiple_px=spec.pixel_multiple, seed=kw.pop("seed", 0))
    images = kw.pop("images", PHOTOS)                   # None: a model bundle (no photos)
    compile_bundle(CompileRequest(model=model, images=None if images is None else str(images),
                                  prompt=kw.pop("prompt", "a photo of sks toy"),
                                  out=str(out), n_front=n_front, n_back=n_back, schedule=sched,
                                  lora=LoraSpec(rank=4, alpha=4.0),
                                  optimizer=kw.pop("optimizer", OptimizerSpec(lr=1e-3)), **kw))
    return out


def train_eager(bundle_dir: Path, run_dir: Path | None, **cfg) -> dict:
    """The eager step under the runtime's loop (what `ditskip-edge train` runs); cfg: RunConfig fields."""
    from ditskip_edge.eager import EagerStep
    from ditskip_edge.runtime.bundle import Bundle
    from ditskip_edge.runtime.loop import RunConfig, train
    bundle = Bundle.open(bundle_dir)
    return train(bundle, EagerStep(bundle), RunConfig(run_dir=run_dir, progress=False, **cfg))


def train_device(bundle_dir: Path, runtime: str, run_dir: Path | None, precision: str | None = None,
                 **cfg) -> dict:
    """A device runtime's adapter under the same loop (the runtime package alone)."""
    from ditskip_edge.runtime.loop import RunConfig
    from ditskip_edge.runtime.run import train_bundle
    return train_bundle(bundle_dir, runtime, RunConfig(run_dir=run_dir, progress=False, **cfg), precision)


def _native_runner(arch: str):
    from device_tests import native_runtime
    try:
        return native_runtime.build(arch)
    except native_runtime.NativeBuildError as e:
        pytest.fail(str(e), pytrace=False)        # a missing toolchain is a failure, not a skip (.ci/run installs it)


@pytest.fixture(scope="session")
def runner():
    """The native device runtime built for x86-64 (`make native`): device_tests.native_runtime.Runner."""
    return _native_runner("x86_64")


@pytest.fixture(scope="session")
def arm64_runner():
    """The native device runtime cross-built for arm64 (`make native-arm64`), run under qemu-aarch64."""
    return _native_runner("arm64")


@pytest.fixture(scope="session")
def flux_bundle(tmp_path_factory) -> Path:
    """flux-tiny bundle: front 1, back 2 of 6 blocks, 6 steps."""
    return compile_tiny(tmp_path_factory.mktemp("flux") / "bundle", "flux-tiny")


@pytest.fixture(scope="session")
def sana_bundle(tmp_path_factory) -> Path:
    """sana-tiny bundle: front 1, back 2 of 6 blocks, 6 steps."""
    return compile_tiny(tmp_path_factory.mktemp("sana") / "bundle", "sana-tiny")


@pytest.fixture(scope="session")
def device_bundle(tmp_path_factory) -> Path:
    """flux-tiny bundle with both runtimes' fp32 and int8 train_step programs (no preprocessing programs), 6 steps,
    grad_accum 2: the one bundle every runtime trains."""
    from export.executorch_stage import ExecutorchPrograms
    from export.ort_stage import OrtPrograms
    return compile_tiny(tmp_path_factory.mktemp("device") / "bundle", "flux-tiny", grad_accum=2,
                        programs=[ExecutorchPrograms(("fp32", "int8"), preprocess=False),
                                  OrtPrograms(("fp32", "int8"))])


@pytest.fixture(scope="session")
def generation_bundle(tmp_path_factory) -> Path:
    """flux-tiny bundle with the generation part at fp32, int8 and int4 (3 default sampler steps), 2 steps."""
    from export.generation_stage import GenerationPrograms
    return compile_tiny(tmp_path_factory.mktemp("gen-flux") / "bundle", "flux-tiny", steps=2,
                        programs=[GenerationPrograms(("fp32", "int8", "int4"), steps=3)])


@pytest.fixture(scope="session")
def generation_testbed_bundle(tmp_path_factory) -> Path:
    """flux-testbed bundle with the generation part at fp32 (MiniLM text encoder program + WordPiece vocabulary)."""
    from export.generation_stage import GenerationPrograms
    return compile_tiny(tmp_path_factory.mktemp("gen-testbed") / "bundle", "flux-testbed", steps=2,
                        programs=[GenerationPrograms(("fp32",), steps=3)])
