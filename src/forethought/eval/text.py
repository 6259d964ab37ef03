"""Text side of evaluation: WikiText detokenisation, decoding samples to text, and held-out references.

Every system's samples and the references go through the same path: token ids in the generating models'
tokenizer -> :func:`decode_samples` (eos = document boundary -> newline, then :func:`detokenize_wikitext`) ->
text that the judge (forethought.eval.judge) retokenises. So references and samples differ only in where the
ids came from.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from forethought.core.errors import ForethoughtError
from forethought.data.corpora import encode_text, spread_windows

# WikiText's tokenised forms of intra-word hyphens and number separators ("1 @,@ 000" = "1,000").
_AT_SEPARATORS = ((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."))
# Headings: "= = Career = =" -> "== Career ==" (longest first, so "= = =" is not eaten by "= =").
_HEADINGS = ((" = = = = ", " ==== "), (" = = = ", " === "), (" = = ", " == "))


def detokenize_wikitext(text: str, unk: str | None = "<unk>") -> str:
    """Undo WikiText's tokenisation spaces so a judge LM sees ordinary English.

    - ``@-@``, ``@,@``, ``@.@`` join their neighbours (``state @-@ of`` -> ``state-of``, ``1 @,@ 000`` -> ``1,000``).
    - No space before ``. , : ; ! ? ) ] }`` or ``'s 're 've 'm 'll 'd 't n't`` (WikiText writes ``don 't``),
      none after ``( [ {``; a double-quote pair hugs its contents (``" word "`` -> ``"word"``, paired left to
      right within a line).
    - Heading markers ``= = x = =`` become ``== x ==``; spaces at line starts and ends are dropped.
    - ``<unk>``: replaced by ``unk`` (default: kept as the literal ``<unk>``, which WikiText-trained models also
      emit, so references and samples are treated alike); ``unk=None`` drops it and the space before it.
    """
    for old, new in _AT_SEPARATORS:
        text = text.replace(old, new)
    if unk is None:
        text = re.sub(r" ?<unk>", "", text)
    elif unk != "<unk>":
        text = text.replace("<unk>", unk)
    for old, new in _HEADINGS:
        text = text.replace(old, new)
    text = re.sub(r" ([.,:;!?)\]}])", r"\1", text)
    text = re.sub(r"([(\[{]) ", r"\1", text)
    text = re.sub(r" ('s|'re|'ve|'m|'ll|'d|'t|n't)\b", r"\1", text)
    text = "\n".join(_pair_quotes(line) for line in text.split("\n"))
    text = re.sub(r"[ \t]+\n", "\n", text)  # trailing spaces
    text = re.sub(r"\n[ \t]+", "\n", text)  # leading spaces
    text = re.sub(r" {2,}", " ", text)
    return text.strip(" \t")


def _pair_quotes(line: str) -> str:
    """``say " hello there " now`` -> ``say "hello there" now``: odd quotes open, even quotes close."""
    parts = line.split('"')
    if len(parts) < 3:
        return line
    out = parts[0]
    for i, part in enumerate(parts[1:], start=1):
        if i % 2 == 1:  # text after an opening quote
            out = out + '"' + part.lstrip(" ")
        else:  # text after a closing quote
            out = out.rstrip(" ") + '"' + part
    return out


def decode_samples(ids: torch.Tensor | np.ndarray | Sequence[Sequence[int]], tokenizer: PreTrainedTokenizerBase,
                   wikitext: bool = True) -> list[str]:
    """Token ids (n, L) in the generating models' tokenizer -> n texts for the judge.

    The eos token marks document boundaries in our token arrays (see forethought.data.corpora.token_array), so
    each eos becomes a newline rather than a literal ``<|endoftext|>`` string the judge would score; other
    special tokens are skipped. With ``wikitext`` the text is detokenised (:func:`detokenize_wikitext`).
    """
    rows = ids.tolist() if isinstance(ids, (torch.Tensor, np.ndarray)) else [list(r) for r in ids]
    eos = tokenizer.eos_token_id
    texts = []
    for row in rows:
        pieces, cur = [], []
        for t in row:
            if t == eos:
                pieces.append(cur)
                cur = []
            else:
                cur.append(int(t))
        pieces.append(cur)
        text = "\n".join(tokenizer.decode(p, skip_special_tokens=True) for p in pieces)
        texts.append(detokenize_wikitext(text) if wikitext else text)
    return texts


def reference_windows(text: str, tokenizer: PreTrainedTokenizerBase, length: int, n: int | None = None,
                      documents: bool = True, spread: str = "even", seed: int = 0) -> np.ndarray:
    """Cut held-out text (e.g. the raw WikiText-2 test split) into non-overlapping windows of ``length`` tokens.

    The text is tokenised exactly as training data is (``documents``: one document per line with eos after it,
    as token_array does for WikiText), so a window looks like a sample from a model trained on that data: it
    may start mid-sentence and cross document boundaries. Returns int64 (n_windows, length): every window, or
    ``n`` of them drawn across the whole text (``spread``, see :func:`reference_set`).
    """
    return reference_set(text, tokenizer, length, n, documents, spread, seed)[0]


def reference_set(text: str, tokenizer: PreTrainedTokenizerBase, length: int, n: int | None = None,
                  documents: bool = True, spread: str = "even", seed: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`reference_windows` with where they came from: (windows (n, length), token offsets (n,), tokens in
    the text). ``spread`` (forethought.data.corpora.spread_windows): ``even`` = evenly spaced over the whole
    text, first to last window (the default: the first windows of WikiText-2's test split are a handful of its
    articles), ``random`` = a seeded random subset, ``first`` = the first ``n``."""
    if length <= 0:
        raise ForethoughtError(f"reference length must be > 0, got {length}")
    ids = encode_text(text, tokenizer, documents=documents).astype(np.int64)
    count = len(ids) // length
    if count == 0:
        raise ForethoughtError(f"the held-out text has {len(ids)} tokens, fewer than one reference of {length}")
    if n is not None and n > count:
        raise ForethoughtError(f"the held-out text gives only {count} references of {length} tokens, {n} asked")
    windows, offsets = spread_windows(ids, count if n is None else n, length, spread, seed)
    return windows.numpy(), offsets, len(ids)
