"""Tokenizers by short spec, all usable offline: GPT-2 BPE, a BPE trained on the corpus, SmolLM2's, or any HF one.

Specs:

- ``gpt2``: GPT-2's byte-level BPE (ids identical to GPT-2's; eos ``<|endoftext|>`` = 50256). Built from the
  ``gpt2.tiktoken`` ranks file that the ``openai-whisper`` package ships, so no network is needed; the
  converted ``tokenizer.json`` is cached.
- ``bpe:<N>``: a byte-level BPE with vocabulary N trained on the given corpus text, cached by corpus hash and N.
- ``smollm2-135m-q4`` / ``smollm2-135m``: SmolLM2's tokenizer (from the converted model folder, see
  ``forethought.core.env``).
- anything else: ``AutoTokenizer.from_pretrained(spec)`` (hub id or local folder), e.g. T5's
  (:data:`T5_TOKENIZER`, the PSF paper's: a SentencePiece unigram model of 32,000 pieces + 100 sentinels, eos
  ``</s>``), which needs the hub or its files in the local HF cache or a folder.

Every returned tokenizer has an eos token, which token arrays use as the document separator.

A run that trains or samples keeps its tokenizer in its folder (:func:`save_run_tokenizer`: ``tokenizer/``,
the tokenizer's own files), and loading from the folder reads that copy first (:func:`run_tokenizer`), so a run
folder decodes its samples without the corpus it was trained on or the cache.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from forethought.core.env import (
    SMOLLM2_ALIASES,
    asset_package_dir,
    default_cache_dir,
    hub_reachable,
    resolve_model_path,
)
from forethought.core.errors import ForethoughtError, first_line
from forethought.core.io import atomic_write_text

EOT = "<|endoftext|>"
GPT2_EOS_ID = 50256
T5_TOKENIZER = "google-t5/t5-small"  # T5's tokenizer (the same for every T5 size; ELF's encoder is t5-small)
# len(tokenizer) of the tokenizers whose size must be known without loading them (`presets memory`, the paper
# preset's parameter counts): GPT-2's 50,257; T5's 32,000 SentencePiece pieces + 100 sentinel ids.
KNOWN_VOCAB_SIZES = {"gpt2": GPT2_EOS_ID + 1, T5_TOKENIZER: 32100}
# GPT-2's pre-tokenisation regex (contractions, letter runs, digit runs, punctuation runs, whitespace).
_GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def load_tokenizer(spec: str, corpus_text: str | None = None, cache_dir: Path | None = None) -> PreTrainedTokenizerBase:
    """Load (or build and cache) the tokenizer named by ``spec``; see the module docstring for the specs.

    ``corpus_text`` is required for ``bpe:<N>`` (the text to train on, normally the train split).
    ``cache_dir`` defaults to ``<cache>/tokenizers``. For ``gpt2``, ``bpe:<N>`` and ``smollm2-135m`` the
    result is a fast (Rust) tokenizer; for other specs it is whatever ``AutoTokenizer`` returns.
    """
    spec = spec.strip()
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir() / "tokenizers"
    if spec == "gpt2":
        tokenizer: PreTrainedTokenizerBase = _gpt2(cache_dir)
    elif spec.startswith("bpe:"):
        tokenizer = _trained_bpe(spec, corpus_text, cache_dir)
    elif spec.lower() in SMOLLM2_ALIASES:
        tokenizer = _from_pretrained(resolve_model_path(spec), spec)
    else:
        tokenizer = _from_pretrained(spec, spec)
    _ensure_eos(tokenizer)
    return tokenizer


# ----------------------------------------------------------------------------------------------------------
# GPT-2 from the tiktoken ranks file
# ----------------------------------------------------------------------------------------------------------


def gpt2_tiktoken_file() -> Path | None:
    """The ``gpt2.tiktoken`` ranks file inside the ``openai-whisper`` package (core.env.asset_package_dir)."""
    folder = asset_package_dir("whisper")
    path = None if folder is None else folder / "assets" / "gpt2.tiktoken"
    return path if path is not None and path.is_file() else None


def _gpt2(cache_dir: Path) -> PreTrainedTokenizerBase:
    cached = cache_dir / "gpt2" / "tokenizer.json"
    backend = _load_cached_json(cached)
    if backend is None:
        ranks = gpt2_tiktoken_file()
        if ranks is not None and importlib.util.find_spec("tiktoken") is None:  # the converter reads ranks with it
            raise ForethoughtError("building the gpt2 tokenizer from openai-whisper's gpt2.tiktoken needs the "
                                   "tiktoken package: pip install 'forethought[gguf]' "
                                   "(or pip install tiktoken==0.14.0)")
        if ranks is not None:
            from transformers.convert_slow_tokenizer import TikTokenConverter  # lazy: only for the one-off build

            backend = TikTokenConverter(
                vocab_file=str(ranks), pattern=_GPT2_PATTERN, extra_special_tokens=[EOT]
            ).converted()
            if backend.get_vocab_size() != GPT2_EOS_ID + 1 or backend.token_to_id(EOT) != GPT2_EOS_ID:
                raise ForethoughtError(f"{ranks} does not hold GPT-2's vocabulary (expected 50,257 tokens)")
            atomic_write_text(cached, backend.to_str())
        else:
            # No offline copy: a hub/HF-cache GPT-2 tokenizer is equally good.
            try:
                return _from_pretrained("openai-community/gpt2", "gpt2")
            except ForethoughtError as e:
                raise ForethoughtError(
                    "cannot build the gpt2 tokenizer: the 'openai-whisper' package (which ships "
                    "whisper/assets/gpt2.tiktoken) is not installed (pip install --no-deps openai-whisper), "
                    f"and the hub copy is unavailable: {e}"
                ) from e
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token=EOT, bos_token=EOT, unk_token=EOT, model_max_length=1024
    )


# ----------------------------------------------------------------------------------------------------------
# BPE trained on the corpus
# ----------------------------------------------------------------------------------------------------------


def _trained_bpe(spec: str, corpus_text: str | None, cache_dir: Path) -> PreTrainedTokenizerFast:
    size_text = spec[len("bpe:") :]
    if not size_text.isdigit() or not 257 <= int(size_text) <= 1_000_000:
        raise ForethoughtError(
            f"tokenizer '{spec}': expected 'bpe:<N>' with 257 <= N <= 1000000 (256 bytes + <|endoftext|>)"
        )
    vocab_size = int(size_text)
    if corpus_text is None or not corpus_text.strip():
        raise ForethoughtError(f"tokenizer '{spec}' is trained on the corpus, but no corpus text was given")
    digest = hashlib.sha256(corpus_text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    cached = cache_dir / f"bpe-{vocab_size}-{digest}" / "tokenizer.json"
    backend = _load_cached_json(cached)
    if backend is None:
        backend = train_byte_level_bpe(corpus_text, vocab_size)
        atomic_write_text(cached, backend.to_str())
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=EOT, bos_token=EOT, unk_token=EOT)


def train_byte_level_bpe(text: str, vocab_size: int) -> Tokenizer:
    """Train a GPT-2-style byte-level BPE on ``text``; ``<|endoftext|>`` is id 0.

    All 256 byte symbols are in the initial alphabet, so any text encodes without unknown tokens. The text is
    fed in newline-ending chunks of about 64k characters (newlines kept, so newline merges are learnt too).
    """
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_chunks(text, 65536), trainer=trainer, length=None)
    return tokenizer


def _chunks(text: str, size: int) -> list[str]:
    out = []
    start = 0
    while start < len(text):
        end = text.find("\n", start + size)
        end = len(text) if end == -1 else end + 1
        out.append(text[start:end])
        start = end
    return out


# ----------------------------------------------------------------------------------------------------------
# The copy a run folder keeps
# ----------------------------------------------------------------------------------------------------------

RUN_TOKENIZER = "tokenizer"  # the folder inside a run folder


def save_run_tokenizer(tokenizer: PreTrainedTokenizerBase, run_dir: Path) -> Path:
    """Write ``tokenizer``'s files into ``<run_dir>/tokenizer/`` unless that folder is there already (a resumed
    run keeps its copy untouched); written under a temporary name and renamed, so the folder is whole or absent."""
    target = Path(run_dir) / RUN_TOKENIZER
    if target.is_dir():
        return target
    tmp = Path(run_dir) / f".{RUN_TOKENIZER}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tokenizer.save_pretrained(tmp)
    os.replace(tmp, target)
    return target


def run_tokenizer(run_dir: Path) -> PreTrainedTokenizerBase | None:
    """The tokenizer a run folder holds (:func:`save_run_tokenizer`), or None when it holds none; a damaged copy
    is a one-line error naming it."""
    folder = Path(run_dir) / RUN_TOKENIZER
    if not folder.is_dir():
        return None
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as e:  # transformers raises OSError / ValueError, the Rust side a bare Exception
        raise ForethoughtError(f"the run's tokenizer in {folder} is unreadable: {first_line(e)}") from None
    _ensure_eos(tokenizer)
    return tokenizer


# ----------------------------------------------------------------------------------------------------------
# Shared helpers
# ----------------------------------------------------------------------------------------------------------


def _load_cached_json(path: Path) -> Tokenizer | None:
    """A cached tokenizer.json, or None when absent or unreadable (then it is rebuilt and overwritten)."""
    if not path.is_file():
        return None
    try:
        return Tokenizer.from_file(str(path))
    except Exception:  # the Rust side raises a bare Exception for a malformed file
        return None


def _from_pretrained(name_or_path: str, spec: str) -> PreTrainedTokenizerBase:
    """AutoTokenizer with a fast offline failure: when the hub is unreachable only local files are tried."""
    local = Path(name_or_path).expanduser()
    if local.exists() and not local.is_dir():
        raise ForethoughtError(f"tokenizer '{spec}': {local} is a file; give the folder that holds tokenizer files")
    online = local.is_dir() or hub_reachable()
    source = str(local) if local.is_dir() else name_or_path
    try:
        return AutoTokenizer.from_pretrained(source, local_files_only=not online)
    except (OSError, ValueError, json.JSONDecodeError) as e:
        where = "this folder" if local.is_dir() else ("the hub" if online else "the local HF cache (hub unreachable)")
        reason = first_line(e)
        raise ForethoughtError(
            f"tokenizer '{spec}' not found in {where}: {reason}. Known offline specs: gpt2, bpe:<N>, "
            "smollm2-135m-q4, or a local folder with tokenizer files"
        ) from e


def _ensure_eos(tokenizer: PreTrainedTokenizerBase) -> None:
    """Give the tokenizer an eos token if it lacks one (documents are joined with it)."""
    if tokenizer.eos_token is not None:
        return
    vocab = tokenizer.get_vocab()
    if EOT in vocab:
        tokenizer.eos_token = EOT
    elif tokenizer.sep_token is not None:
        tokenizer.eos_token = tokenizer.sep_token
    else:
        tokenizer.add_special_tokens({"eos_token": EOT})
