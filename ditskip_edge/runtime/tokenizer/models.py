"""The `model` step: a tokenizer.json `model` entry -> an object whose tokenize(word) gives the word's ids.

    BPE        merges applied lowest rank first, leftmost on ties; continuing_subword_prefix, end_of_word_suffix, unk
               with fuse_unk, byte_fallback to "<0xNN>", ignore_merges (dropout other than 0 is refused)
    Unigram    Viterbi over piece scores, ties to the earlier and shorter piece; an uncovered character is unk with
               score min - 10; consecutive unks fused; byte_fallback
    WordLevel  the word's id, else unk

Each model caches the ids of up to CACHE_MAX_WORDS words. Any other type raises ValueError naming its path.
"""

from __future__ import annotations

import heapq


CACHE_MAX_WORDS = 10_000                       # per-model word cache; cleared when full
UNIGRAM_UNK_PENALTY = 10.0                     # unk score = lowest piece score - this (as SentencePiece)


class _WordCache:
    def __init__(self):
        self.words: dict[str, list[int]] = {}

    def get(self, word: str, compute) -> list[int]:
        ids = self.words.get(word)
        if ids is None:
            if len(self.words) >= CACHE_MAX_WORDS:
                self.words.clear()
            ids = self.words[word] = compute(word)
        return ids


class BPE:
    def __init__(self, spec: dict, where: str = "model"):
        if spec.get("dropout") not in (None, 0, 0.0):
            raise ValueError(f"{where}: BPE dropout {spec['dropout']} is not supported (sampling, not a function)")
        self.vocab: dict[str, int] = spec["vocab"]
        self.unk = spec.get("unk_token")
        self.prefix, self.suffix = spec.get("continuing_subword_prefix"), spec.get("end_of_word_suffix")
        self.fuse_unk, self.byte_fallback = spec.get("fuse_unk", False), spec.get("byte_fallback", False)
        self.ignore_merges = spec.get("ignore_merges", False)
        cut = len(self.prefix or "")
        self.merges: dict[tuple[int, int], tuple[int, int]] = {}   # (left id, right id) -> (rank, merged id)
        for rank, m in enumerate(spec.get("merges", [])):
            left, right = m.split(" ") if isinstance(m, str) else m
            try:
                self.merges[(self.vocab[left], self.vocab[right])] = (rank, self.vocab[left + right[cut:]])
            except KeyError as err:
                raise ValueError(f"{where}.merges[{rank}]: {err.args[0]!r} is not in the vocabulary") from None
        self.cache = _WordCache()

    def symbols(self, word: str) -> list[int]:
        """One id per character (prefix / suffix added), byte-fallback ids, or unk (fused when fuse_unk)."""
        ids: list[int] = []
        unk_pending = False
        last = len(word) - 1
        for i, ch in enumerate(word):
            s = ch
            if i > 0 and self.prefix is not None:
                s = self.prefix + s
            if i == last and self.suffix is not None:
                s = s + self.suffix
            if s in self.vocab:
                if unk_pending:
                    ids.append(self.vocab[self.unk])
                    unk_pending = False
                ids.append(self.vocab[s])
                continue
            if self.byte_fallback:
                fallback = [self.vocab.get(f"<0x{b:02X}>") for b in s.encode("utf-8")]
                if None not in fallback:
                    ids += fallback                     # (a pending unk stays pending, as in `tokenizers`)
                    continue
            if self.unk is not None:
                if self.unk not in self.vocab:
                    raise ValueError(f"model: unk_token {self.unk!r} is not in the vocabulary")
                if unk_pending and not self.fuse_unk:
                    ids.append(self.vocab[self.unk])
                unk_pending = True
        if unk_pending:
            ids.append(self.vocab[self.unk])
        return ids

    def merge(self, word: str) -> list[int]:
        """Word::merge_all: a heap of (rank, position, merged id) over a linked list of symbols, so the lowest rank
        merges first and the leftmost on ties; an entry whose pair has changed since is skipped. O(n log n): a
        Gemma prompt is one word of the whole text."""
        ids = self.symbols(word)
        n = len(ids)
        nxt, prv, alive = list(range(1, n + 1)), list(range(-1, n - 1)), [True] * n
        heap = []
        for i in range(n - 1):
            m = self.merges.get((ids[i], ids[i + 1]))
            if m is not None:
                heap.append((m[0], i, m[1]))
        heapq.heapify(heap)
        while heap:
            _, i, merged = heapq.heappop(heap)
            j = nxt[i]
            if not alive[i] or j >= n:
                continue
            m = self.merges.get((ids[i], ids[j]))
            if m is None or m[1] != merged:
                continue
            ids[i], alive[j] = merged, False
            nxt[i] = nxt[j]
            if nxt[i] < n:
                prv[nxt[i]] = i
            for a, b in ((prv[i], i), (i, nxt[i])):
                if a >= 0 and b < n:
                    m = self.merges.get((ids[a], ids[b]))
                    if m is not None:
                        heapq.heappush(heap, (m[0], a, m[1]))
        return [ids[i] for i in range(n) if alive[i]]

    def tokenize(self, word: str) -> list[int]:
        if not word:
            return []
        if self.ignore_merges and word in self.vocab:
            return [self.vocab[word]]
        return list(self.cache.get(word, self.merge))


class Unigram:
    def __init__(self, spec: dict, where: str = "model"):
        pieces = spec["vocab"]
        self.scores = [float(score) for _, score in pieces]
        self.ids = {piece: i for i, (piece, _) in enumerate(pieces)}          # a repeated piece: the last id
        self.unk_id, self.byte_fallback = spec.get("unk_id"), spec.get("byte_fallback", False)
        if self.unk_id is not None and not 0 <= self.unk_id < len(pieces):
            raise ValueError(f"{where}: unk_id {self.unk_id} is outside the vocabulary of {len(pieces)}")
        self.unk_score = min(self.scores) - UNIGRAM_UNK_PENALTY
        self.max_piece_chars = max(len(p) for p, _ in pieces)
        self.cache = _WordCache()

    def viterbi(self, text: str) -> list[str]:
        """Best segmentation (highest total score); ties keep the first candidate seen (earlier start, then
        shorter piece); characters no piece covers are unk; runs of unk come back fused."""
        n = len(text)
        best: list[tuple[float, int, int] | None] = [None] * (n + 1)   # end -> (score, start, id)
        best[0] = (0.0, 0, -1)
        for start in range(n):
            base = best[start][0]
            single = False
            for end in range(start + 1, min(n, start + self.max_piece_chars) + 1):
                pid = self.ids.get(text[start:end])
                if pid is None:
                    continue
                cand = base + self.scores[pid]
                if best[end] is None or cand > best[end][0]:
                    best[end] = (cand, start, pid)
                single = single or end == start + 1
            if not single:
                if self.unk_id is None:
                    raise ValueError(f"model: no piece covers {text[start]!r} and the Unigram has no unk_id")
                cand = base + self.unk_score
                if best[start + 1] is None or cand > best[start + 1][0]:
                    best[start + 1] = (cand, start, self.unk_id)
        pieces, unk_run, end = [], [], n
        while end > 0:
            _, start, pid = best[end]
            if pid == self.unk_id:
                unk_run.append(text[start:end])
            else:
                if unk_run:
                    pieces.append("".join(reversed(unk_run)))
                    unk_run = []
                pieces.append(text[start:end])
            end = start
        if unk_run:
            pieces.append("".join(reversed(unk_run)))
        return pieces[::-1]

    def _ids(self, text: str) -> list[int]:
        out = []
        for piece in self.viterbi(text):
            pid = self.ids.get(piece)
            if pid is None and self.byte_fallback:
                fallback = [self.ids.get(f"<0x{b:02X}>") for b in piece.encode("utf-8")]
                if None not in fallback:
                    out += fallback
                    continue
            out.append(self.unk_id if pid is None else pid)
        return out

    def tokenize(self, word: str) -> list[int]:
        return list(self.cache.get(word, self._ids)) if word else []


class WordLevel:
    def __init__(self, spec: dict, where: str = "model"):
        self.vocab, self.unk = spec["vocab"], spec.get("unk_token")

    def tokenize(self, word: str) -> list[int]:
        if word in self.vocab:
            return [self.vocab[word]]
        if self.unk in self.vocab:
            return [self.vocab[self.unk]]
        raise ValueError(f"model: {word!r} is not in the WordLevel vocabulary and unk_token {self.unk!r} is missing")


MODELS = {"BPE": BPE, "Unigram": Unigram, "WordLevel": WordLevel}


def build_model(spec: dict, where: str = "model"):
    kind = spec.get("type")
    if kind is None and "merges" in spec:                # very old files leave out the BPE type
        kind = "BPE"
    if kind not in MODELS:
        raise ValueError(f"{where}: type {kind!r} is not supported")
    return MODELS[kind](spec, where)


def model_vocab(model) -> dict[str, int]:
    return model.ids if isinstance(model, Unigram) else model.vocab
