"""Generation on the device: a prompt -> a picture, with the bundle's generation programs and the trained LoRA.

    check the request (prompt, steps, seed, LoRA, output path) and the generation part's files  -- before any work
    cond   = encode(prompt); uncond = encode("")     hash_text (numpy) | WordPiece + the text_encoder program |
                                                     a pipeline's encoders: each one's tokenizer.json
                                                     (runtime/text_tokens.py) + its program (FLUX: CLIP -> pooled,
                                                     T5 -> txt; SANA: Gemma-2 -> txt, txt_mask)
    x      = rng.normal(seed, latent_shape)          [1, C, h, w], the portable RNG every runtime shares
    weights= the bundle's weights file, memory-mapped; with a LoRA, its linears merged at the weights' bit width
             into a file beside the LoRA (once), mapped the same way (runtime/weights.py)
    for i in 0 .. N-1 (sigmas: runtime/sampler.py), branches b = uncond, cond (cond alone at guidance 1):
        values[b] = gen_embed(x, t, b's conditioning)                        every program at batch 1
        for each block in order, for each branch b:
            values[b] |= gen_block.<kind>(values[b], that block's weights)  one block, one branch at a time
        v_b = gen_head(values[b]);  x = x + (sigma_{i+1} - sigma_i) (v_u + g (v_c - v_u))
    image  = clip(decode(x) * 0.5 + 0.5, 0, 1)  -> PNG, written to a temporary name and renamed
             decode: the decode program once per latent tile (one tile: the whole latent, unless the bundle was
             compiled with --decode-tile-px), the tiles blended as diffusers' tiled_decode (runtime/tiling.py)

A program's inputs are looked up by name among the values computed so far (`w.<state>`: the block's weights), its
outputs stored under their names (export/generation_modules.py), so the loop knows nothing of the architecture.
The guidance branches pass through a block one after the other (the block's weights read once per step, its
activations those of one branch: half the arena of a batch of 2), as diffusers' FluxPipeline runs true CFG.
One program is loaded at a time (each holds its own planned arena): a sampler step loads embed, each block kind in
turn and head; the text encoder is dropped before sampling, the transformer programs before decoding. Footprint
(runtime/footprint.py) is read after every program call.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import bindings, hash_text, rng, sampler, tiling
from .bundle import MANIFEST, Bundle, sha256_file, verify_files
from .contract import (CFG_BRANCHES, GEN_BLOCK, GEN_EMBED, GEN_HEAD, GENERATION_FORMAT_VERSION, TEXT_ENCODER,
                       TEXT_HASH, TEXT_KINDS, TEXT_MINILM, TEXT_PIPELINE, ordered_inputs)
from .errors import BundleError, UserError
from .footprint import read_footprint
from .forward import executorch_call
from .progress import Progress
from .safetensors_io import read_safetensors
from .weights import ST_DTYPES, MappedWeights, merge_lora, write_weights_streamed

WEIGHT_PREFIX = "w."
MAX_STEPS = 1000
MAX_SEED = 2 ** 63
LORA_STATES = ("weight", "w_codes", "w_scale", "w_packed")
MERGED_FORMAT = "ditskip-edge-merged-lora"


@dataclass
class GenerateRequest:
    prompt: str
    seed: int = 0
    steps: int | None = None                 # None: the bundle's default
    guidance: float | None = None            # None: the bundle's default
    lora: Path | None = None                 # a LoRA file (pytorch_lora_weights.safetensors) or its folder
    precision: str | None = None             # None: the bundle's first generation precision
    out: Path | None = None                  # PNG path (the CLI); None: only return the image


class FootprintWatch:
    """The largest dirty anonymous and file-backed growth over the baseline seen at any check."""

    def __init__(self):
        self.base = read_footprint()
        self.peak_anon = self.peak_file = 0

    def check(self) -> None:
        f = read_footprint()
        if f is not None and self.base is not None:
            d = f.since(self.base)
            self.peak_anon = max(self.peak_anon, d["anon_bytes"])
            self.peak_file = max(self.peak_file, d["file_bytes"])

    def to_json(self) -> dict:
        f = read_footprint()
        return {"baseline_anon_bytes": None if self.base is None else self.base.anon_bytes,
                "peak_anon_growth_bytes": self.peak_anon, "peak_file_growth_bytes": self.peak_file,
                "peak_rss_bytes": None if f is None else f.peak_rss_bytes,
                "counts": "growth over the process after importing the runtime: RssAnon (dirty anonymous, what a "
                          "phone counts) and RssFile (mapped programs and weights) apart, read after every program"}


class Programs:
    """ExecuTorch inference programs of one bundle, loaded on demand, one at a time: each loaded program holds its
    own planned arena, so calling another program first drops the loaded one (a sampler step loads embed, each block
    kind in turn and head once: FLUX's double blocks, then its single blocks), and the footprint is the largest
    program's arena, not the sum (measured at the 288M layout: 145 MiB with all four kept, benchmarks/results/
    generation_memory_before_streamed_merge.md@eb714ee, in git)."""

    def __init__(self, bundle: Bundle, watch: FootprintWatch):
        import torch                          # the bindings exchange torch tensors (no autograd is used)
        self.torch, self.bundle, self.watch = torch, bundle, watch
        self._load = bindings.executorch_inference()._load_for_executorch
        self.loaded: dict[str, object] = {}

    def __call__(self, entry: dict, named: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        module = self.loaded.get(entry["path"])
        path = self.bundle.root / entry["path"]
        if module is None:
            self.drop()
            module = self.loaded[entry["path"]] = executorch_call(lambda: self._load(str(path)), "load", path)
        tensors = [self.torch.from_numpy(a) for a in ordered_inputs(entry, named)]
        outs = executorch_call(lambda: module.forward(tensors), "run", path)
        self.watch.check()
        return {o["name"]: t.numpy() for o, t in zip(entry["outputs"], outs)}

    def drop(self) -> None:
        self.loaded.clear()


class Generator:
    def __init__(self, bundle: Bundle, precision: str | None = None):
        self.bundle = bundle
        if "generation" not in bundle.manifest:
            raise BundleError(f"{bundle.root / MANIFEST}: no generation part (compile with --generation)")
        self.gen = bundle.field("generation")
        if self.gen.get("format_version") != GENERATION_FORMAT_VERSION:
            raise BundleError(f"{bundle.root / MANIFEST}: generation part format {self.gen.get('format_version')}, "
                              f"this runtime reads {GENERATION_FORMAT_VERSION}: recompile with --generation")
        precisions = self.gen["precisions"]
        self.precision = precision or precisions[0]
        if self.precision not in precisions:
            raise UserError(f"--precision {self.precision}: the bundle's generation programs are "
                            f"{', '.join(precisions)}")
        self.text = self.gen["text"]
        if self.text.get("kind") not in TEXT_KINDS:
            raise BundleError(f"{bundle.root / MANIFEST}: generation.text.kind {self.text.get('kind')!r}: this "
                              f"runtime reads {', '.join(TEXT_KINDS)}")
        self.decode = self.gen["decode"]
        decode_names = set(self.decode["programs"].values())
        text_names = set(self.text_programs())
        self.entries = {p["name"]: p for p in bundle.programs
                        if p.get("runtime") == "executorch" and (p["name"] in text_names or p["name"] in decode_names)}
        self.entries.update({p["name"]: p for p in bundle.programs if p.get("runtime") == "executorch"
                             and p.get("precision") == self.precision
                             and (p["name"] in (GEN_EMBED, GEN_HEAD) or p["name"].startswith(GEN_BLOCK + "."))})
        need = [GEN_EMBED, GEN_HEAD, *sorted(decode_names)] + [f"{GEN_BLOCK}.{k}" for k in {b["kind"] for b in self.gen["blocks"]}]
        need += sorted(text_names)
        missing = [n for n in need if n not in self.entries]
        if missing:
            raise BundleError(f"{bundle.root / MANIFEST}: generation programs {missing} missing at {self.precision}")
        self.weights_rel = self.gen["weights"][self.precision]
        self._tokenizers: dict[str, object] = {}

    def text_programs(self) -> list[str]:
        kind = self.text["kind"]
        if kind == TEXT_PIPELINE:
            return [e["program"] for e in self.text["encoders"]]
        return [TEXT_ENCODER] if kind == TEXT_MINILM else []

    # ------------------------------------------------------------------------------------------ checks
    def files(self) -> list[str]:
        rels = [self.weights_rel] + [e["path"] for e in self.entries.values()]
        rels += [self.decode["weights"]] if self.decode["weights"] else []
        if self.text["kind"] == TEXT_MINILM:
            rels.append(self.text["tokenizer"]["vocab"])
        if self.text["kind"] == TEXT_PIPELINE:
            rels += [e["tokenizer"]["file"] for e in self.text["encoders"]]
        return rels

    def verify(self) -> None:
        """Size and SHA-256 of every file generation reads (not the training part's residual cache)."""
        verify_files(self.bundle.root, self.bundle.manifest, only=self.files())
        files = self.bundle.field("files")
        unlisted = [r for r in self.files() if r not in files]
        if unlisted:
            raise BundleError(f"{self.bundle.root / MANIFEST}: {unlisted[0]} is not listed in files")

    def tokenizer(self, program: str = TEXT_ENCODER):
        """The tokenizer feeding one text encoder program (text_tokens.py, Hugging Face `tokenizers`): MiniLM's
        WordPiece vocab.txt, or a pipeline encoder's tokenizer.json."""
        if program not in self._tokenizers:
            from .text_tokens import TextTokenizer
            if self.text["kind"] == TEXT_MINILM:
                tk = self.text["tokenizer"]
                self._tokenizers[program] = TextTokenizer.from_wordpiece_vocab(self.bundle.root / tk["vocab"],
                                                                               tk["max_len"])
            else:
                tk = self._encoder(program)["tokenizer"]
                self._tokenizers[program] = TextTokenizer.from_file(self.bundle.root / tk["file"], tk["max_len"],
                                                                    tk["pad_id"])
        return self._tokenizers[program]

    def _encoder(self, program: str) -> dict:
        return next(e for e in self.text["encoders"] if e["program"] == program)

    def count_tokens(self, prompt: str) -> tuple[int, int, str]:
        """(tokens the prompt needs, tokens the encoder takes, what a token is); for a pipeline, the encoder that
        limits the prompt (T5, Gemma-2: FLUX's CLIP truncates at 77 tokens as FluxPipeline does)."""
        kind = self.text["kind"]
        if kind == TEXT_HASH:
            return hash_text.count_tokens(prompt), int(self.text["seq_len"]), "words"
        if kind == TEXT_MINILM:
            return (self.tokenizer().count_tokens(prompt), int(self.text["seq_len"]),
                    "WordPiece tokens incl. [CLS] [SEP]")
        e = next(e for e in self.text["encoders"] if e["tokenizer"]["limits_prompt"])
        n = self.tokenizer(e["program"]).count_tokens(_preprocess(prompt, e["tokenizer"]["preprocess"]))
        return n, int(e["tokenizer"]["max_len"]), f"{e['role']} tokens incl. special tokens"

    def check_prompt(self, prompt: str) -> int:
        if not prompt or not prompt.strip():
            raise UserError("--prompt is empty: describe the picture, e.g. 'a photo of sks dog on a beach'")
        n, limit, unit = self.count_tokens(prompt)
        if n > limit:
            raise UserError(f"--prompt has {n} {unit}; the text encoder takes at most {limit}: shorten it")
        if self.text["kind"] == TEXT_HASH and n == 0:
            raise UserError("--prompt has no words (letters or digits) for the hash text encoder")
        return n

    # ------------------------------------------------------------------------------------------ text
    def encode(self, prompts: dict[str, str], programs: Programs) -> dict[str, dict[str, np.ndarray]]:
        """{branch: prompt} -> {branch: cond.<key> arrays, batch 1}. Each text program is loaded once and run for
        every branch's prompt before the next is loaded (one program's weights and arena at a time)."""
        t = self.text
        if t["kind"] == TEXT_HASH:
            arch = self.bundle.field("model", "arch")
            return {b: {"cond." + k: v for k, v in hash_text.encode(p, arch, t["seq_len"], t["dim"],
                                                                    t.get("pooled_dim", 0)).items()}
                    for b, p in prompts.items()}
        out: dict[str, dict[str, np.ndarray]] = {b: {} for b in prompts}
        for name in self.text_programs():
            for b, prompt in prompts.items():
                text = (prompt if t["kind"] == TEXT_MINILM
                        else _preprocess(prompt, self._encoder(name)["tokenizer"]["preprocess"]))
                ids, mask = self.tokenizer(name).encode(text)
                out[b].update(programs(self.entries[name], {"input_ids": np.asarray([ids], np.int64),
                                                            "attention_mask": np.asarray([mask], np.int64)}))
        return out

    # ------------------------------------------------------------------------------------------ weights
    def base_weights(self) -> MappedWeights:
        return MappedWeights(self.bundle.root / self.weights_rel)

    def lora_weights(self, lora: Path, base: MappedWeights) -> MappedWeights:
        """The LoRA'd linears merged at the weights' bit width, written once beside the LoRA file and mapped."""
        lora_path = Path(lora)
        if lora_path.is_dir():
            lora_path = lora_path / self.bundle.field("lora_file", "name")
        tensors = check_lora(self.bundle, lora_path, base)
        identity = {"format": MERGED_FORMAT, "lora_sha256": sha256_file(lora_path), "precision": self.precision,
                    "weights_sha256": self.bundle.file_sha256(self.weights_rel)}
        out = lora_path.parent / "merged" / f"{self.precision}.safetensors"
        if out.is_file():
            try:
                merged = MappedWeights(out)
                if merged.metadata == identity:
                    return merged
            except (BundleError, ValueError):
                pass
        scale = float(self.gen["lora_scale"])
        modules = sorted({k.rsplit(".lora_", 1)[0] for k in tensors})
        layout = {key: (ST_DTYPES[base.entries[key]["dtype"]], base.entries[key]["shape"])
                  for m in modules for key in (f"{m.removeprefix('transformer.')}.{s}" for s in LORA_STATES)
                  if key in base}

        def merged():                           # one linear at a time: its fp32 weight is the largest transient
            for module in modules:
                a, b = tensors[f"{module}.lora_A.weight"], tensors[f"{module}.lora_B.weight"]
                name = module.removeprefix("transformer.")
                own = {s: base.array(f"{name}.{s}") for s in LORA_STATES if f"{name}.{s}" in base}
                yield from ((f"{name}.{s}", v) for s, v in merge_lora(own, a, b, scale).items())

        write_weights_streamed(out, layout, identity, merged())
        return MappedWeights(out)

    # ------------------------------------------------------------------------------------------ sampling
    def sample(self, prompt: str, seed: int, steps: int, guidance: float, lora: Path | None = None,
               progress: bool = True) -> tuple[np.ndarray, dict]:
        """-> (image [H, W, 3] float32 in [0, 1], timings and footprint)."""
        watch = FootprintWatch()
        t0 = time.perf_counter()
        base = self.base_weights()
        merged = self.lora_weights(lora, base) if lora is not None else None
        t_merge = time.perf_counter() - t0
        programs = Programs(self.bundle, watch)
        branches = cfg_branches(guidance)
        conds = self.encode({b: "" if b == "uncond" else prompt for b in branches}, programs)
        programs.drop()
        if "guidance" in self.gen["cond_keys"]:
            for c in conds.values():
                c["cond.guidance"] = np.full((1,), self.gen["guidance_embeds"], np.float32)
        t_text = time.perf_counter() - t0 - t_merge
        x = rng.normal(seed, tuple(self.gen["latent_shape"]))
        sig = sampler.sigmas_for(self.gen["sampler"], steps)
        bar = Progress("generate", steps, enabled=progress)
        t1 = time.perf_counter()
        for i in range(steps):
            t = np.full((1,), sig[i], np.float32)
            values = {b: programs(self.entries[GEN_EMBED], {"x": x, "t": t, **conds[b]}) for b in branches}
            for block in self.gen["blocks"]:
                entry = self.entries[f"{GEN_BLOCK}.{block['kind']}"]
                for b in branches:
                    values[b].update(programs(entry, BlockInputs(values[b], block["name"], base, merged)))
            v = {b: programs(self.entries[GEN_HEAD], values[b])["v"] for b in branches}
            del values
            v_guided = v["cond"] if len(branches) == 1 else sampler.guided(v["uncond"], v["cond"], guidance)
            x = sampler.euler_step(x, v_guided, sig[i], sig[i + 1])
            bar.update()
        bar.close()
        t_loop = time.perf_counter() - t1
        programs.drop()
        image = self.decode_latents(x, programs)
        programs.drop()
        pixels = np.clip(image[0].transpose(1, 2, 0) * np.float32(0.5) + np.float32(0.5), 0, 1).astype(np.float32)
        total = time.perf_counter() - t0
        return pixels, {"seconds": round(total, 3), "seconds_merge": round(t_merge, 3),
                        "seconds_text": round(t_text, 3), "seconds_sampling": round(t_loop, 3),
                        "seconds_per_step": round(t_loop / steps, 4),
                        "seconds_decode": round(total - t_loop - t_text - t_merge, 3), "footprint": watch.to_json()}


    def decode_latents(self, x: np.ndarray, programs: Programs) -> np.ndarray:
        """latents [1, C, h, w] -> image [1, 3, H, W]: the decode program per tile (runtime/tiling.py), its weights
        read from the mapped decoder file."""
        d = self.decode
        weights = MappedWeights(self.bundle.root / d["weights"]) if d["weights"] else None

        def decode_tile(latents: np.ndarray) -> np.ndarray:
            entry = self.entries[d["programs"][tiling.tile_key(latents.shape[2], latents.shape[3])]]
            return programs(entry, BlockInputs({"x": latents}, d["weight_prefix"], weights, None))["image"]

        return tiling.decode_tiled(x, decode_tile, d["tile_latent"], d["stride_latent"], d["scale"])


def cfg_branches(guidance: float) -> tuple[str, ...]:
    """The branches one sampler step runs: at guidance 1 the guided velocity is the cond one, so the uncond pass is
    skipped (as diffusers' pipelines do when the guidance scale is not above 1 and a negative prompt is given)."""
    return ("cond",) if guidance == 1.0 else CFG_BRANCHES


class BlockInputs(dict):
    """The values computed so far, plus `w.<state>` -> this block's weights (merged LoRA'd linears first)."""

    def __init__(self, values: dict, block: str, base: MappedWeights, merged: MappedWeights | None):
        super().__init__(values)
        self.block, self.base, self.merged = block, base, merged

    def get(self, name, default=None):
        if not name.startswith(WEIGHT_PREFIX):
            return super().get(name, default)
        key = f"{self.block}.{name[len(WEIGHT_PREFIX):]}"
        if self.merged is not None and key in self.merged:
            return self.merged.array(key)
        if key not in self.base:
            raise BundleError(f"{self.base.path}: no weight {key} (the program needs it)")
        return self.base.array(key)


def _preprocess(prompt: str, rule: str) -> str:
    """A pipeline's own prompt preprocessing before its tokenizer (SanaPipeline lower-cases and strips)."""
    if rule == "none":
        return prompt
    if rule == "lower_strip":
        return prompt.lower().strip()
    raise BundleError(f"generation.text.encoders[].tokenizer.preprocess {rule!r}: expected none or lower_strip")


def check_lora(bundle: Bundle, path: Path, base: MappedWeights) -> dict[str, np.ndarray]:
    """The LoRA file's tensors, refused unless it is this bundle's LoRA: the keys and metadata the manifest's
    lora_file records (the plan's kept blocks, rank, alpha, targets) and shapes that fit the frozen weights."""
    if not path.is_file():
        raise UserError(f"--lora {path}: no such file")
    try:
        tensors, meta = read_safetensors(path)
    except Exception as e:                                  # safetensors raises its own error types
        raise UserError(f"--lora {path}: not a safetensors file ({type(e).__name__})") from e
    record = bundle.field("lora_file")
    want = set(record["keys"])
    if set(tensors) != want:
        extra, missing = sorted(set(tensors) - want), sorted(want - set(tensors))
        raise UserError(f"--lora {path}: a LoRA for another model or plan: its keys are not this bundle's "
                        f"({len(tensors)} keys, {len(want)} expected; e.g. unexpected {extra[:1]}, missing "
                        f"{missing[:1]})")
    if meta != record["metadata"]:
        raise UserError(f"--lora {path}: its metadata (rank, alpha, target modules) differs from this bundle's "
                        f"lora_file record: a LoRA for another plan")
    for k, a in tensors.items():
        if a.dtype not in (np.float32, np.float16) or a.ndim != 2:
            raise UserError(f"--lora {path}: tensor {k} is {a.dtype} {list(a.shape)}, expected a float matrix")
        module = k.rsplit(".lora_", 1)[0].removeprefix("transformer.")
        own = {s: base.entries[f"{module}.{s}"]["shape"] for s in LORA_STATES if f"{module}.{s}" in base}
        if not own:
            raise UserError(f"--lora {path}: {module} is not a linear of this model")
        o = (own.get("weight") or own.get("w_codes") or own.get("w_packed"))[0]
        i = own["weight"][1] if "weight" in own else own["w_codes"][1] if "w_codes" in own else 2 * own["w_packed"][1]
        ok = a.shape[1] == i if ".lora_A." in k else a.shape[0] == o
        if not ok:
            raise UserError(f"--lora {path}: {k} has shape {list(a.shape)}, which does not fit the frozen weight "
                            f"[{o}, {i}]: a LoRA for another model")
        tensors[k] = a.astype(np.float32)
    return tensors


def check_request(req: GenerateRequest, gen: Generator) -> tuple[int, float]:
    """Everything a user can get wrong, before any work. Returns (steps, guidance)."""
    gen.check_prompt(req.prompt)
    steps = gen.gen["sampler"]["default_steps"] if req.steps is None else req.steps
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS:
        raise UserError(f"--steps {steps}: expected an integer from 1 to {MAX_STEPS}")
    guidance = gen.gen["sampler"]["guidance_scale"] if req.guidance is None else float(req.guidance)
    if not (math.isfinite(guidance) and 0 <= guidance <= 100):
        raise UserError(f"--guidance {guidance}: expected a number in [0, 100]")
    if not 0 <= req.seed < MAX_SEED:
        raise UserError(f"--seed {req.seed}: expected 0 <= seed < 2^63")
    if req.out is not None:
        out = Path(req.out)
        if out.suffix.lower() != ".png":
            raise UserError(f"--out {out}: expected a .png path")
        if out.is_dir():
            raise UserError(f"--out {out} is a folder: expected a .png path")
    return steps, guidance


def generate(bundle_dir: str | Path, req: GenerateRequest, progress: bool = True) -> tuple[np.ndarray, dict]:
    """Check everything, sample, and with req.out write the PNG atomically. -> (image [H, W, 3] in [0, 1], summary)."""
    bundle = Bundle.open(bundle_dir, verify=False)          # manifest digest; generation's files verified below
    gen = Generator(bundle, req.precision)
    gen.verify()
    steps, guidance = check_request(req, gen)
    if req.lora is not None:
        lora = Path(req.lora)
        check_lora(bundle, lora / bundle.field("lora_file", "name") if lora.is_dir() else lora, gen.base_weights())
    image, timing = gen.sample(req.prompt, req.seed, steps, guidance, req.lora, progress)
    summary = {"prompt": req.prompt, "seed": req.seed, "steps": steps, "guidance": guidance,
               "precision": gen.precision, "lora": None if req.lora is None else str(req.lora),
               "size_px": list(image.shape[:2]), **timing}
    if req.out is not None:
        summary["out"] = str(write_png(Path(req.out), image))
    return image, summary


def to_uint8(image: np.ndarray) -> np.ndarray:
    """[H, W, 3] in [0, 1] -> uint8, as diffusers' numpy_to_pil rounds."""
    return np.round(image * 255).astype(np.uint8)


def write_png(out: Path, image: np.ndarray) -> Path:
    from PIL import Image
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        Image.fromarray(to_uint8(image)).save(tmp, format="PNG")
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return out
