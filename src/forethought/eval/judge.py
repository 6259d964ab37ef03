"""Judge-LM metrics, one forward pass per sample set: generative perplexity, unigram entropy, MAUVE features.

Conventions (those of the MDLM, Duo, BD3-LM and ELF papers and code): samples are decoded to text
(forethought.eval.text) and retokenised with the judge's tokenizer, without its own special tokens. A start token is
prepended (the document separator ``<|endoftext|>`` when the judge has one, else its bos, else its eos; see
:func:`start_token_id`) so that *every* text token is scored, the first one conditioned on the start token
only; the start token itself is never scored. Generative perplexity is exp of the token-weighted mean NLL over
all scored tokens of all samples (long samples weigh more).
Unigram entropy is the entropy (nats) of each sample's histogram of judge token ids, averaged over samples.
MAUVE features are the judge's final-layer hidden state (after its final norm) at the last text token
(``pooling="last"``, MAUVE's own convention with gpt2-large) or the mean over text tokens (``"mean"``).
The default judge is SmolLM2-135M (offline); any HF causal LM id works (gpt2-large is the papers' judge).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch
import torch.nn.functional as F

from forethought.core.errors import ForethoughtError

if TYPE_CHECKING:  # type hints only: importing transformers takes seconds, and unigram entropy needs none of it
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

DEFAULT_JUDGE = "smollm2-135m"


@dataclass
class JudgeResult:
    gen_ppl: float  # exp(token-weighted mean NLL), nats -> perplexity
    entropy: float  # mean over samples of the unigram entropy (nats) of judge token ids
    n_tokens: int  # scored judge tokens over all samples
    features: np.ndarray  # (n, d) float32 judge hidden states for MAUVE
    entropies: np.ndarray  # (n,) per-sample unigram entropy (nats)
    nll_per_token: np.ndarray  # (n,) each sample's mean NLL (nan for an empty sample)
    token_counts: np.ndarray  # (n,) each sample's scored judge tokens (gen-PPL = exp(sum nll·count / sum count))


def load_judge(name: str = DEFAULT_JUDGE) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The judge LM and tokenizer by alias / hub id / folder (``smollm2-135m`` works offline); eval mode."""
    from forethought.models.hf import load_causal_lm  # lazy: the conversion machinery is heavy

    return load_causal_lm(name)


def start_token_id(tokenizer: PreTrainedTokenizerBase) -> int | None:
    """The token prepended to every text before scoring: ``<|endoftext|>`` when the vocabulary has it (the
    pretraining document separator of GPT-2 and SmolLM2 — SmolLM2-Instruct's bos is the chat marker
    ``<|im_start|>``, which would make the first token a role name), else the bos, else the eos."""
    eot = tokenizer.get_vocab().get("<|endoftext|>")
    if eot is not None:
        return int(eot)
    return tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id


def judge_token_ids(texts: Sequence[str], tokenizer: PreTrainedTokenizerBase,
                    max_tokens: int | None = None) -> list[list[int]]:
    """Judge-tokenizer ids of each text (no special tokens), truncated to ``max_tokens`` when given."""
    ids = tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]
    return [list(r[:max_tokens]) if max_tokens is not None else list(r) for r in ids]


def unigram_entropy(ids: Sequence[int] | np.ndarray | torch.Tensor) -> float:
    """Entropy in nats of one sample's token histogram (0 for an empty or single-token-type sample)."""
    arr = np.asarray(ids.tolist() if isinstance(ids, torch.Tensor) else ids, dtype=np.int64).ravel()
    if arr.size == 0:
        return 0.0
    counts = np.unique(arr, return_counts=True)[1].astype(np.float64)
    p = counts / counts.sum()
    return float(-(p * np.log(p)).sum())


def mean_unigram_entropy(samples: Sequence[Sequence[int]]) -> float:
    """Mean over samples of :func:`unigram_entropy`."""
    if not samples:
        raise ForethoughtError("no samples to compute unigram entropy over")
    return float(np.mean([unigram_entropy(s) for s in samples]))


def matched_length(tokenizer: PreTrainedTokenizerBase, *text_sets: Sequence[str], quantile: float = 0.0) -> int:
    """One judge-token length cap for references and samples, so MAUVE compares texts of equal length.

    The ``quantile`` of the judge token counts over all given texts (0 = the shortest text: every text is cut
    to exactly that many tokens; a small quantile such as 0.05 keeps one degenerate short sample from
    shortening everything, at the price of those few texts staying shorter). Pass it as ``max_tokens`` to
    :func:`judge_texts` for every set that MAUVE compares.
    """
    counts = [len(r) for texts in text_sets for r in judge_token_ids(texts, tokenizer)]
    if not counts:
        raise ForethoughtError("no texts to match lengths over")
    n = int(np.floor(np.quantile(np.asarray(counts), quantile)))
    if n <= 0:
        raise ForethoughtError("matched length is 0 judge tokens (empty texts); raise the quantile")
    return n


@dataclass
class JudgePass:
    """A judge's per-position outputs for a set of texts, from which :meth:`result` derives a
    :class:`JudgeResult` at any length cap without a second forward pass.

    The judge is causal, so its NLLs and hidden states at the first ``n`` positions of a text are those of the
    text cut to ``n`` tokens: one pass over the full texts serves every cap (the benchmark caches passes per
    sample set and fixes the common cap only once every set is scored). Memory: one (row length, d) float32
    array per text.
    """

    ids: list[list[int]]  # judge token ids of each text (no start token)
    nll: list[np.ndarray]  # per text: NLL (nats, float64) of each scored token, in order
    hidden: list[np.ndarray]  # per text: (row length, d) float32 final-layer states (row = start token + text)
    start: bool  # whether a start token was prepended (then every text token is scored)

    def result(self, max_tokens: int | None = None, pooling: Literal["last", "mean"] = "last") -> JudgeResult:
        """Metrics of the texts cut to ``max_tokens`` judge tokens (see :func:`judge_texts`)."""
        if pooling not in ("last", "mean"):
            raise ForethoughtError(f"unknown pooling '{pooling}'; expected last or mean")
        s = int(self.start)
        totals, counts, feats, entropies = [], [], [], []
        for ids, nll, h in zip(self.ids, self.nll, self.hidden, strict=True):
            n = len(ids) if max_tokens is None else min(len(ids), max_tokens)
            row = n + s  # row length after the cut
            scored = nll[:max(row - 1, 0)]
            totals.append(float(scored.sum()))
            counts.append(len(scored))
            if pooling == "last":
                feats.append(h[max(row - 1, 0)])
            else:  # mean over the text positions (the start token's state only for an empty text)
                feats.append(h[s:row].mean(0) if row > s else h[0])
            entropies.append(unigram_entropy(ids[:n]))
        n_tokens = int(sum(counts))
        if n_tokens == 0:
            raise ForethoughtError("no judge tokens to score (all texts empty)")
        count = np.asarray(counts, dtype=np.float64)
        per_token = np.asarray(totals) / np.maximum(count, 1)
        per_token[count == 0] = np.nan
        ent = np.asarray(entropies)
        return JudgeResult(gen_ppl=math.exp(float(np.sum(totals)) / n_tokens), entropy=float(ent.mean()),
                           n_tokens=n_tokens, features=np.stack(feats).astype(np.float32), entropies=ent,
                           nll_per_token=per_token, token_counts=count.astype(np.int64))

    def save(self, path: Path) -> None:
        """Flat arrays + row offsets in one safetensors file, written atomically."""
        from safetensors.numpy import save_file

        lengths = np.asarray([len(r) for r in self.ids], dtype=np.int64)
        arrays = {"lengths": lengths, "start": np.asarray([int(self.start)], dtype=np.int64),
                  "ids": np.asarray([t for r in self.ids for t in r], dtype=np.int64),
                  "nll": np.concatenate(self.nll) if self.nll else np.zeros(0),
                  "hidden": np.concatenate(self.hidden)}
        tmp = path.with_name(path.name + ".tmp")
        save_file(arrays, str(tmp))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> JudgePass:
        from safetensors.numpy import load_file

        try:
            a = load_file(str(path))
        except Exception as e:  # truncated or not safetensors
            raise ForethoughtError(f"cannot read the judge cache {path}: {e}") from e
        s = int(a["start"][0])
        ids, nll, hidden = [], [], []
        i = j = k = 0
        for n in a["lengths"].tolist():
            ids.append(a["ids"][i:i + n].tolist())
            nll.append(a["nll"][j:j + n + s - 1] if n + s > 1 else a["nll"][j:j])
            rows = max(n + s, 1)  # an empty text without a start token keeps one (padding) state
            hidden.append(a["hidden"][k:k + rows])
            i, j, k = i + n, j + max(n + s - 1, 0), k + rows
        return cls(ids, nll, hidden, bool(s))


@torch.no_grad()
def score_texts(texts: Sequence[str], model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                max_tokens: int | None = None, batch_size: int = 16, prepend_start: bool = True) -> JudgePass:
    """One judge forward pass over texts (cut to ``max_tokens`` judge tokens), keeping every position's NLL and
    final-layer state; :meth:`JudgePass.result` turns it into metrics at any cap up to ``max_tokens``."""
    if not texts:
        raise ForethoughtError("no texts to judge")
    start = start_token_id(tokenizer) if prepend_start else None
    if prepend_start and start is None:
        raise ForethoughtError("the judge tokenizer has no <|endoftext|>, bos or eos token to start texts with")
    ids = judge_token_ids(texts, tokenizer, max_tokens)
    limit = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)
    longest = max(len(r) for r in ids) + (start is not None)
    if limit is not None and longest > limit:
        raise ForethoughtError(f"a sample has {longest} judge tokens but the judge reads at most {limit}; "
                               "pass max_tokens")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (start or 0)
    device = next(model.parameters()).device
    nll_rows: list[np.ndarray] = []
    hidden_rows: list[np.ndarray] = []
    for b in range(0, len(ids), batch_size):
        rows = [([start] if start is not None else []) + r for r in ids[b:b + batch_size]]
        T = max(1, max(len(r) for r in rows))
        inp = torch.full((len(rows), T), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), T), dtype=torch.long)
        for i, r in enumerate(rows):  # right padding: positions of real tokens stay 0..n-1
            inp[i, :len(r)] = torch.tensor(r, dtype=torch.long)
            mask[i, :len(r)] = 1
        inp, mask = inp.to(device), mask.to(device)  # (B, T)
        out = model(input_ids=inp, attention_mask=mask, output_hidden_states=True)
        # (B, T-1) NLL of token t+1. Per-token cross-entropy in float32 (a float64 copy of the (B, T, V) logits
        # would cost gigabytes at V = 49k); sums over many tokens are taken in float64.
        nll = F.cross_entropy(out.logits[:, :-1].float().transpose(1, 2), inp[:, 1:], reduction="none")
        h = out.hidden_states[-1].float()  # (B, T, d), after the judge's final norm
        for i, r in enumerate(rows):
            nll_rows.append(nll[i, :max(len(r) - 1, 0)].double().cpu().numpy())
            hidden_rows.append(h[i, :max(len(r), 1)].cpu().numpy())
    return JudgePass(ids, nll_rows, hidden_rows, start is not None)


def judge_texts(texts: Sequence[str], model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                max_tokens: int | None = None, batch_size: int = 16,
                pooling: Literal["last", "mean"] = "last", prepend_start: bool = True) -> JudgeResult:
    """Score texts under a judge causal LM: gen-PPL, unigram entropy and MAUVE features in one forward pass.

    ``max_tokens`` truncates each text's judge tokens (the same cap for references and samples gives MAUVE
    matched lengths, see :func:`matched_length`); entropy, NLL and features all use the truncated tokens.
    With ``prepend_start`` off, nothing is prepended and the first token of each text is not scored.
    """
    if pooling not in ("last", "mean"):
        raise ForethoughtError(f"unknown pooling '{pooling}'; expected last or mean")
    return score_texts(texts, model, tokenizer, max_tokens, batch_size, prepend_start).result(max_tokens, pooling)
