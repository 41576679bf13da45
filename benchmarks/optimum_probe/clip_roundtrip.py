"""Cross-version check of a saved CLIPTextModel folder. save: python clip_roundtrip.py save DIR ; check: ... check DIR"""
import sys, torch
from pathlib import Path
from safetensors import safe_open
import transformers
from transformers import CLIPTextConfig, CLIPTextModel
mode, d = sys.argv[1], Path(sys.argv[2])
ids = torch.tensor([[3, 4, 5, 6, 7, 8, 2]])
if mode == "save":
    torch.manual_seed(0)
    m = CLIPTextModel(CLIPTextConfig(vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                     num_attention_heads=2, projection_dim=32, max_position_embeddings=77,
                                     eos_token_id=2, pad_token_id=0, bos_token_id=3)).eval()
    m.save_pretrained(d)
    with torch.no_grad():
        torch.save(m(ids).pooler_output, d / "ref.pt")
    print("saved with transformers", transformers.__version__, "keys e.g.", sorted(safe_open(str(d / "model.safetensors"), "pt").keys())[:2])
else:
    m = CLIPTextModel.from_pretrained(d).eval()
    with torch.no_grad():
        diff = float((m(ids).pooler_output - torch.load(d / "ref.pt")).abs().max())
    print("loaded with transformers", transformers.__version__, f"max|diff| vs saver's output {diff:.2e}")
