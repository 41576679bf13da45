"""Block selection by cross-attention masking (issue 3, PAPER.md section 3) on the tiny models."""

from __future__ import annotations

import json
from functools import lru_cache

import pytest
import torch

from conftest import PHOTOS, compile_tiny
from ditskip_edge.runtime.errors import UserError
from ditskip_edge.images import load_photos
from ditskip_edge.models.latents import LatentEncoder
from ditskip_edge.models.loading import build_transformer, build_vae, resolve_spec
from ditskip_edge.models.text import encode_prompt
from ditskip_edge.models.views import make_view
from ditskip_edge.plan import skip_budget
from ditskip_edge.selection import SelectionConfig, check_budget, make_probe, select_plan, select_splits
from ditskip_edge.selection.embedders import PixelStatsEmbedder, cosine_distance
from ditskip_edge.selection.masking import text_masked
from ditskip_edge.selection.sampling import generate
from ditskip_edge.selection.scorer import WEAK_PICK_SHARE, back_set, choose, front_set, pick_stability

PROMPT = "a photo of sks toy"
FAST = SelectionConfig(steps=2, num_seeds=2)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The tiny models run far faster on one thread when the 2 shared cores are busy; restored afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@lru_cache(maxsize=None)
def tiny(name: str):
    spec = resolve_spec(name)
    return spec, build_transformer(spec), build_vae(spec)


def model_input(name: str):
    spec, transformer, _ = tiny(name)
    view = make_view(spec.arch, transformer)
    side = spec.train_px // spec.vae_scale_factor
    channels = transformer.config.in_channels // (4 if spec.arch == "flux" else 1)
    x = view.pack(torch.randn(1, channels, side, side, generator=torch.Generator().manual_seed(3)))
    return view, x, torch.tensor([0.6]), encode_prompt(spec, PROMPT)


def block_outputs(view, x, t, cond) -> list[dict]:
    streams, ctx = view.embed(x, t, cond)
    outs = []
    for block in view.blocks:
        streams = view.run_block(block, streams, ctx)
        outs.append(streams)
    return outs + [{"head": view.head(streams, ctx)}]


@pytest.mark.parametrize("name", ["flux-tiny", "sana-tiny"])
@torch.no_grad()
def test_masking_no_block_reproduces_unmasked_output_exactly(name):
    view, x, t, cond = model_input(name)
    plain = view(x, t, cond)
    with text_masked(view, []):
        masked = view(x, t, cond)
    assert torch.equal(plain, masked)


@pytest.mark.parametrize("name", ["flux-tiny", "sana-tiny"])
@torch.no_grad()
def test_masking_one_block_changes_output_from_that_block_on_only(name):
    view, x, t, cond = model_input(name)
    plain = block_outputs(view, x, t, cond)
    for j in (0, len(view.blocks) // 2, len(view.blocks) - 1):     # flux-tiny: a double and single blocks
        with text_masked(view, [j]):
            masked = block_outputs(view, x, t, cond)
        for i in range(j):                                         # blocks before j: bit-for-bit unchanged
            assert all(torch.equal(plain[i][k], masked[i][k]) for k in plain[i])
        assert not torch.equal(plain[j]["img"], masked[j]["img"])
        assert not torch.allclose(plain[-1]["head"], masked[-1]["head"], atol=1e-6)


@torch.no_grad()
def test_flux_mask_leaves_text_queries_alone():
    """Only image-query -> text-key scores are masked: a double block's text stream output does not change."""
    view, x, t, cond = model_input("flux-tiny")
    plain = block_outputs(view, x, t, cond)
    with text_masked(view, [0]):
        masked = block_outputs(view, x, t, cond)
    torch.testing.assert_close(masked[0]["txt"], plain[0]["txt"], rtol=1e-5, atol=1e-6)


def test_processors_restored_after_masking_even_on_error():
    view, x, t, cond = model_input("sana-tiny")
    before = [b.attn2.processor for b in view.blocks]
    with pytest.raises(RuntimeError):
        with text_masked(view, [1, 2]):
            assert view.blocks[1].attn2.processor is not before[1]
            raise RuntimeError("boom")
    assert [b.attn2.processor for b in view.blocks] == before


def brute_force_score(name: str, n: int, m: int, config: SelectionConfig, seed: int) -> float:
    """The paper's sum for one split, from fresh generations (no probe, no cache)."""
    spec, transformer, vae = tiny(name)
    view = make_view(spec.arch, transformer)
    decoder = LatentEncoder(spec.arch, vae)
    cond = encode_prompt(spec, PROMPT)
    side = spec.train_px // spec.vae_scale_factor
    shape = (1, vae.config.latent_channels, side, side)
    embed = PixelStatsEmbedder()
    total = 0.0
    seeds = [seed + j for j in range(config.num_seeds)]
    for s in seeds:
        x_g = embed(generate(view, decoder, cond, shape, s, config.steps))
        for masked in (front_set(n), back_set(len(view.blocks), m)):
            if masked:
                with text_masked(view, masked):
                    total += float(cosine_distance(x_g, embed(generate(view, decoder, cond, shape, s,
                                                                         config.steps)))[0])
    return total / len(seeds)


@pytest.mark.parametrize("name", ["sana-tiny", "flux-tiny"])
def test_chosen_split_minimises_brute_force_score(name):
    spec, transformer, vae = tiny(name)
    k = 3
    probe = make_probe(spec, transformer, vae, None, PROMPT, 5, FAST)
    result = select_splits(probe, [k])[0]
    brute = {(n, k - n): brute_force_score(name, n, k - n, FAST, 5) for n in range(k + 1)}
    assert len(result["splits"]) == k + 1
    for row in result["splits"]:
        assert row["score"] == pytest.approx(brute[(row["n_front"], row["n_back"])], rel=1e-6, abs=1e-9)
    best = min(brute.values())
    assert brute[tuple(result["chosen"])] == pytest.approx(best, rel=1e-6, abs=1e-9)


def test_selection_is_deterministic_for_a_seed():
    spec, transformer, vae = tiny("sana-tiny")
    a = select_plan(spec, transformer, vae, None, PROMPT, 0.5, seed=7, config=FAST)
    b = select_plan(spec, transformer, vae, None, PROMPT, 0.5, seed=7, config=FAST)
    assert (a.n_front, a.n_back) == (b.n_front, b.n_back)
    assert a.selection["scores"] == b.selection["scores"]
    assert a.chosen_by == "selection" and a.n_front + a.n_back == 3


def test_proxy_method_scores_every_split_from_the_photos():
    spec, transformer, vae = tiny("sana-tiny")
    photos = load_photos(PHOTOS, spec.data_px)
    probe = make_probe(spec, transformer, vae, photos, PROMPT, 0,
                       SelectionConfig(method="proxy", num_seeds=2, proxy_times=(0.7, 0.3)))
    result = select_splits(probe, [2, 4])
    assert [len(r["splits"]) for r in result] == [3, 5]
    assert all(r["score"] > 0 for res in result for r in res["splits"])
    with pytest.raises(UserError, match="photos"):
        make_probe(spec, transformer, vae, None, PROMPT, 0, SelectionConfig(method="proxy"))


@pytest.mark.parametrize("name", ["flux-tiny", "sana-tiny"])
def test_tuned_probe_masks_a_lora_tuned_copy_and_leaves_the_callers_model_alone(name):
    """The paper's probe: a short LoRA on the photos first. The caller's transformer (which the compiler builds the
    bundle from) keeps its weights and gets no adapter; the probe's unmasked images differ from the base's."""
    spec, transformer, vae = tiny(name)
    photos = load_photos(PHOTOS, spec.data_px)
    before = {k: v.clone() for k, v in transformer.state_dict().items()}
    cfg = SelectionConfig(steps=2, num_seeds=1, probe="tuned", tune_steps=3, tune_lr=1e-2, tune_batch=2)
    tuned = make_probe(spec, transformer, vae, photos, PROMPT, 0, cfg)
    base = make_probe(spec, transformer, vae, photos, PROMPT, 0, SelectionConfig(steps=2, num_seeds=1))
    assert set(transformer.state_dict()) == set(before)
    assert all(torch.equal(v, before[k]) for k, v in transformer.state_dict().items())
    assert any("lora_" in n for n, _ in tuned.view.named_parameters())
    assert not torch.allclose(tuned.images(()), base.images(()))
    plan = select_plan(spec, transformer, vae, photos, PROMPT, 0.5, seed=0, config=cfg)
    assert plan.selection["config"]["probe"] == "tuned" and "LoRA" in plan.selection["scored_on"]
    with pytest.raises(UserError, match="photos"):
        make_probe(spec, transformer, vae, None, PROMPT, 0, cfg)


def split_rows(seed_scores: dict[tuple[int, int], list[float]]) -> list[dict]:
    """`score_splits`-shaped rows from per-seed scores, in n order."""
    return [{"n_front": n, "n_back": m, "score": sum(v) / len(v), "seed_scores": v}
            for (n, m), v in sorted(seed_scores.items())]


def test_pick_share_is_one_when_every_seed_backs_the_chosen_split():
    rows = split_rows({(0, 2): [0.5, 0.4, 0.6], (1, 1): [0.1, 0.2, 0.1], (2, 0): [0.3, 0.3, 0.2]})
    st = pick_stability(rows)
    assert st["pick_share"] == 1.0 and st["runner_up"] is None
    assert st["per_seed_picks"] == [[1, 1]] * 3


def test_pick_share_falls_below_the_warning_line_when_the_seeds_disagree():
    # seeds 0-3 favour 0/2, seeds 4-7 favour 2/0; the mean picks 0/2 by a hair
    rows = split_rows({(0, 2): [0.0] * 4 + [0.39] * 4, (1, 1): [0.9] * 8, (2, 0): [0.4] * 4 + [0.0] * 4})
    st = pick_stability(rows)
    assert list(choose(rows)) == [0, 2]
    assert 0.2 < st["pick_share"] < WEAK_PICK_SHARE and st["runner_up"] == [2, 0]
    assert st["per_seed_picks"] == [[0, 2]] * 4 + [[2, 0]] * 4
    assert pick_stability(rows) == st                          # a fixed generator: the same share every time


def test_one_seed_has_no_pick_share_to_report():
    st = pick_stability(split_rows({(0, 1): [0.2], (1, 0): [0.3]}))
    assert st["pick_share"] is None and st["per_seed_picks"] == [[0, 1]]


@pytest.mark.parametrize("config", [SelectionConfig(steps=2, num_seeds=3),
                                    SelectionConfig(method="proxy", num_seeds=2, proxy_times=(0.7, 0.3))])
def test_each_splits_seed_scores_average_to_its_score(config):
    spec, transformer, vae = tiny("sana-tiny")
    probe = make_probe(spec, transformer, vae, load_photos(PHOTOS, spec.data_px), PROMPT, 4, config)
    result = select_splits(probe, [3])[0]
    for row in result["splits"]:
        assert len(row["seed_scores"]) == config.num_seeds
        assert sum(row["seed_scores"]) / config.num_seeds == pytest.approx(row["score"], rel=1e-9, abs=1e-12)
    assert len(result["stability"]["per_seed_picks"]) == config.num_seeds


def test_a_choice_within_the_probes_noise_is_warned_and_a_firm_one_is_not(monkeypatch, caplog):
    import ditskip_edge.selection as selection
    spec, transformer, vae = tiny("sana-tiny")
    probe = make_probe(spec, transformer, vae, None, PROMPT, 0, FAST)
    split_disagree = split_rows({(0, 2): [0.0, 0.39], (1, 1): [0.9, 0.9], (2, 0): [0.4, 0.0]})
    split_agree = split_rows({(0, 2): [0.0, 0.1], (1, 1): [0.9, 0.9], (2, 0): [0.4, 0.5]})
    for rows, warned in ((split_disagree, True), (split_agree, False)):
        monkeypatch.setattr(selection, "score_splits", lambda probe, k, rows=rows: rows)
        caplog.clear()
        with caplog.at_level("WARNING", logger="ditskip_edge.selection"):
            result = selection.select_splits(probe, [2])[0]
        assert result["chosen"] == [0, 2]
        assert any("within the probe's noise" in r.getMessage() for r in caplog.records) == warned


@pytest.mark.parametrize("k", [0, -1, 6, 7])
def test_budget_out_of_range_is_a_clear_error(k):
    with pytest.raises(UserError, match="need 0 < k < 6"):
        check_budget(6, k)


@pytest.mark.parametrize("ratio", [0.0, 1.0, -0.2, 1.5])
def test_ratio_out_of_range_is_a_clear_error(ratio):
    with pytest.raises(UserError, match=r"skip ratio"):
        skip_budget(6, ratio)
    spec, transformer, vae = tiny("sana-tiny")
    with pytest.raises(UserError, match=r"skip ratio"):
        select_plan(spec, transformer, vae, None, PROMPT, ratio, seed=0, config=FAST)


def test_pixel_stats_distance_is_zero_for_same_image_and_positive_otherwise():
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(1, 3, 40, 40, generator=g) * 2 - 1, torch.rand(1, 3, 40, 40, generator=g) * 2 - 1
    emb = PixelStatsEmbedder()
    assert float(cosine_distance(emb(a), emb(a))[0]) == pytest.approx(0.0, abs=1e-12)
    assert float(cosine_distance(emb(a), emb(b))[0]) > 1e-3


def test_cli_select_json_prints_one_document(tmp_path, capsys):
    from compiler.cli import main
    plot = tmp_path / "scores.png"
    rc = main(["select", "--model", "sana-tiny", "--images", str(PHOTOS), "--prompt", PROMPT, "--skip-ratio",
               "0.3", "0.5", "--steps", "2", "--plot", str(plot), "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["chosen"]) == {"0.3", "0.5"}
    for r in doc["results"]:
        assert len(r["splits"]) == r["budget"] + 1
        assert sum(r["chosen"]) == r["budget"]
    assert plot.is_file() and plot.read_bytes()[:4] == b"\x89PNG"


def test_cli_select_writes_no_file_unless_asked(tmp_path, capsys, monkeypatch):
    from compiler.cli import main
    monkeypatch.chdir(tmp_path)
    assert main(["select", "--model", "sana-tiny", "--prompt", PROMPT, "--budget", "2", "--steps", "2",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["plot"] is None
    assert list(tmp_path.iterdir()) == []


def test_cli_select_bad_budget_exits_2(capsys):
    from compiler.cli import main
    assert main(["select", "--model", "sana-tiny", "--prompt", PROMPT, "--budget", "6", "--json"]) == 2
    assert "need 0 < k < 6" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["flux-tiny", "sana-tiny"])
def test_compile_skip_ratio_records_the_selected_plan_in_the_manifest(tmp_path, name):
    bundle = compile_tiny(tmp_path / "b", name, n_front=None, n_back=None, steps=2, skip_ratio=0.5)
    plan = json.loads((bundle / "manifest.json").read_text())["plan"]
    assert plan["chosen_by"] == "selection"
    sel = plan["selection"]
    assert sel["method"] == "generation" and sel["embedder"] == "pixel-stats" and sel["budget"] == 3
    best = min(sel["scores"], key=lambda r: (r["score"], r["n_front"]))
    assert [plan["n_front"], plan["n_back"]] == [best["n_front"], best["n_back"]]
    assert len(sel["stability"]["per_seed_picks"]) == len(sel["seeds"])      # how firmly the seeds back it
    assert sel["stability"]["pick_share"] is not None


def save_tiny_vision_models(folder):
    """Random tiny DINOv2 and CLIP folders, as a user's local DINO / CLIP download would look (no download)."""
    from transformers import (BitImageProcessor, CLIPConfig, CLIPImageProcessor, CLIPModel, Dinov2Config,
                              Dinov2Model)
    torch.manual_seed(0)
    small = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    Dinov2Model(Dinov2Config(image_size=32, patch_size=8, **small)).save_pretrained(folder / "dino")
    BitImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(
        folder / "dino")
    CLIPModel(CLIPConfig(text_config=dict(vocab_size=100, projection_dim=16, **small),
                         vision_config=dict(image_size=32, patch_size=8, projection_dim=16, **small),
                         projection_dim=16)).save_pretrained(folder / "clip")
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(
        folder / "clip")


def test_local_dino_and_clip_folders_plug_in_as_embedders(tmp_path):
    pytest.importorskip("transformers")
    from ditskip_edge.selection.embedders import load_embedder
    save_tiny_vision_models(tmp_path)
    g = torch.Generator().manual_seed(1)
    a, b = torch.rand(1, 3, 48, 48, generator=g) * 2 - 1, torch.rand(1, 3, 48, 48, generator=g) * 2 - 1
    for name, kind in (("dino", "dinov2"), ("clip", "clip")):
        emb = load_embedder(str(tmp_path / name))
        assert emb.kind == kind
        assert float(cosine_distance(emb(a), emb(a))[0]) == pytest.approx(0.0, abs=1e-9)
        assert float(cosine_distance(emb(a), emb(b))[0]) > 0
    spec, transformer, vae = tiny("sana-tiny")
    plan = select_plan(spec, transformer, vae, None, PROMPT, 0.3, seed=0,
                       config=SelectionConfig(steps=1, num_seeds=1, embedder=str(tmp_path / "dino")))
    assert plan.selection["embedder"] == str(tmp_path / "dino")
    with pytest.raises(UserError, match="pixel-stats"):
        load_embedder(str(tmp_path / "missing"))
