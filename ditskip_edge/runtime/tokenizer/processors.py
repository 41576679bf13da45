"""The `post_processor` step: the special-token ids a tokenizer.json post-processor puts before and after a
single sequence.

Supported types: TemplateProcessing (one $A), RobertaProcessing, BertProcessing, ByteLevel (no-op on ids), Sequence.
Any other type raises ValueError naming its path.
"""

from __future__ import annotations


def build_post_processor(spec: dict | None, where: str = "post_processor") -> tuple[list[int], list[int]]:
    """(ids before the sequence, ids after it) that the post-processor adds to a single sequence."""
    if spec is None:
        return [], []
    kind = spec.get("type")
    if kind == "Sequence":
        before, after = [], []
        for i, s in enumerate(spec["processors"]):
            b, a = build_post_processor(s, f"{where}.processors[{i}]")
            before, after = b + before, after + a
        return before, after
    if kind == "ByteLevel":
        return [], []
    if kind in ("RobertaProcessing", "BertProcessing"):
        return [spec["cls"][1]], [spec["sep"][1]]
    if kind == "TemplateProcessing":
        before, after, seen = [], [], False
        for j, piece in enumerate(spec["single"]):
            if "Sequence" in piece:
                if piece["Sequence"]["id"] != "A" or seen:
                    raise ValueError(f"{where}.single[{j}]: only one $A sequence is supported")
                seen = True
            elif "SpecialToken" in piece:
                name = piece["SpecialToken"]["id"]
                (after if seen else before).extend(spec["special_tokens"][name]["ids"])
            else:
                raise ValueError(f"{where}.single[{j}]: {piece!r} is neither Sequence nor SpecialToken")
        if not seen:
            raise ValueError(f"{where}.single: the template has no $A")
        return before, after
    raise ValueError(f"{where}: type {kind!r} is not supported")
