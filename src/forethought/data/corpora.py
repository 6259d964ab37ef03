"""Language-modelling corpora: where their text lives, how it is split, and cached token arrays.

A corpus name is one of:

- a known name (``wikitext-2``, ``tinyshakespeare``, ``tinystories``, ``openwebtext``): read from the data root
  (``$FORETHOUGHT_DATA``), else from the Hugging Face hub by its usual id when the ``datasets`` package is
  installed and the hub can be reached;
- ``generated``: a small deterministic English-like text built here, so tests and demos need no files;
- a path to a ``.txt`` file, or to a ``.jsonl`` file of documents (one JSON object per line, its document in
  ``text``);
- ``hf:<dataset_id>[:<config>]``: any hub dataset with a ``text`` column.

Single-file text corpora are split 90/10 into train/valid by characters (as nanoGPT does for tiny-shakespeare),
and their test split is the valid split. Corpora of documents (``openwebtext``, a ``.jsonl`` file) are split by
whole documents instead (:func:`split_documents`): the last 10 % of the documents, at most 100,000, are held out
(the field's OpenWebText split, e.g. MDLM's: the last 100,000 documents of its only split), their first half the
valid split and the rest the test split; each document is followed by the end-of-document token. The tokenizer
machinery (transformers) is imported only when a token array is first built, so listing or reading corpora stays fast.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch

from forethought.core.env import data_root, datasets_available, hub_dataset_unavailable_reason, load_hub_dataset
from forethought.core.errors import ForethoughtError, first_line
from forethought.core.io import atomic_write_bytes
from forethought.data.planted import PLANTED

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

SPLITS = ("train", "valid", "test")
TRAIN_FRACTION = 0.9
# Bump when the tokenisation scheme of token_array changes, so stale caches are not reused.
_TOKEN_CACHE_VERSION = 1
# Bump when generated_corpus changes its output.
_GENERATED_VERSION = 1
HELDOUT_DOCUMENTS = 100_000  # documents held out at most (split_documents)
# Separates whole documents in the text of a corpus of documents (the ASCII record separator, removed from the
# documents themselves): encode_text(documents=True) puts the end-of-document token there.
DOC_SEP = "\x1e"


# ----------------------------------------------------------------------------------------------------------
# Known corpora and how a name resolves to a source
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Known:
    """A named corpus: its layout under the data root and its hub fallback."""

    folder: str
    split_files: bool  # True: <folder>/{train,valid,test}.txt; False: one .txt file in <folder>, split 90/10
    hub_id: str
    hub_config: str | None
    documents: bool  # one document per line, eos between them (see token_array)
    layout: str  # for error messages
    jsonl: str = ""  # a corpus of documents: this JSON-lines file in <folder>, split by documents


_KNOWN: dict[str, _Known] = {
    # The local files are the tokenised `wiki.*.tokens` form (with <unk>), which is the hub's non-raw config.
    "wikitext-2": _Known(
        "wikitext-2", True, "Salesforce/wikitext", "wikitext-2-v1", True, "wikitext-2/{train,valid,test}.txt"
    ),
    "tinyshakespeare": _Known(
        "tinyshakespeare", False, "karpathy/tiny_shakespeare", None, False, "tinyshakespeare/input.txt"
    ),
    "tinystories": _Known("tinystories", False, "roneneldan/TinyStories", None, False, "tinystories/<one file>.txt"),
    # The documents of Skylion007/openwebtext's one split (8,013,769), or a JSON-lines copy of them (its to_json).
    "openwebtext": _Known("openwebtext", False, "Skylion007/openwebtext", None, True,
                          "openwebtext/openwebtext.jsonl (one JSON object per line, its document in 'text', as "
                          "datasets' to_json writes Skylion007/openwebtext)", jsonl="openwebtext.jsonl"),
}
KNOWN_CORPORA: tuple[str, ...] = (*_KNOWN, "generated")


@dataclass(frozen=True)
class CorpusSource:
    """Where one corpus's text comes from, resolved once from its name."""

    name: str
    kind: Literal["split_files", "single_file", "jsonl", "hub", "generated"]
    paths: tuple[Path, ...] = ()  # local files (split_files: train, valid, test; single_file, jsonl: one)
    hub_id: str | None = None
    hub_config: str | None = None
    documents: bool = False
    data_root_tried: str | None = None  # for hub fallbacks of known names: the error message names both places

    def fingerprint(self) -> dict[str, object]:
        """What the text depends on, for cache keys: local files by path, mtime and size."""
        if self.kind == "generated":
            return {"generated": _GENERATED_VERSION}
        if self.kind == "hub":
            return {"hub": self.hub_id, "config": self.hub_config}
        files = []
        for p in self.paths:
            st = p.stat()
            files.append([str(p.resolve()), st.st_mtime_ns, st.st_size])
        return {"files": files}


def resolve_corpus(name: str) -> CorpusSource:
    """Turn a corpus name into a :class:`CorpusSource`, or raise one readable error saying what was tried."""
    name = name.strip()
    if name == PLANTED:
        raise ForethoughtError("corpus 'planted' is generated as token ids, not text, so it has no text to read or "
                               "tokenise; only commands that read forethought.data.planted directly (psf recipe) "
                               "support it")
    if name == "generated":
        return CorpusSource("generated", "generated")
    if name.startswith("hf:"):
        dataset_id, _, config = name[3:].partition(":")
        if not dataset_id:
            raise ForethoughtError(f"corpus '{name}': expected 'hf:<dataset_id>[:<config>]'")
        return CorpusSource(name, "hub", hub_id=dataset_id, hub_config=config or None)
    if name in _KNOWN:
        return _resolve_known(name)
    path = Path(name).expanduser()
    if name.endswith(".jsonl"):
        if not path.is_file():
            raise ForethoughtError(f"corpus file not found: {path}")
        return CorpusSource(str(path), "jsonl", paths=(path,), documents=True)
    if name.endswith(".txt") or path.is_file():
        if not path.is_file():
            raise ForethoughtError(f"corpus file not found: {path}")
        return CorpusSource(str(path), "single_file", paths=(path,))
    known = ", ".join(KNOWN_CORPORA)
    raise ForethoughtError(
        f"unknown corpus '{name}'; known names: {known}; or give a path to a .txt file, or 'hf:<dataset_id>[:<config>]'"
    )


def _resolve_known(name: str) -> CorpusSource:
    known = _KNOWN[name]
    root = data_root()
    if root is not None:
        folder = root / known.folder
        if known.jsonl:
            if (folder / known.jsonl).is_file():
                return CorpusSource(name, "jsonl", paths=(folder / known.jsonl,), documents=True)
        elif known.split_files:
            paths = tuple(folder / f"{s}.txt" for s in SPLITS)
            if all(p.is_file() for p in paths):
                return CorpusSource(name, "split_files", paths=paths, documents=known.documents)
        else:
            candidates = sorted(folder.glob("*.txt")) if folder.is_dir() else []
            if len(candidates) > 1:
                listed = ", ".join(p.name for p in candidates)
                raise ForethoughtError(f"corpus '{name}': expected one .txt file in {folder}, found {listed}")
            if candidates:
                return CorpusSource(name, "single_file", paths=(candidates[0],), documents=known.documents)
        tried_local = f"{folder} (expected {known.layout})"
    else:
        tried_local = "the data root (FORETHOUGHT_DATA is not set)"
    source = CorpusSource(
        name,
        "hub",
        hub_id=known.hub_id,
        hub_config=known.hub_config,
        documents=known.documents,
        data_root_tried=tried_local,
    )
    reason = hub_dataset_unavailable_reason()
    if reason is not None:
        raise _not_found(source, reason)
    return source


def _not_found(source: CorpusSource, reason: str) -> ForethoughtError:
    hub = f"{source.hub_id}" + (f" (config {source.hub_config})" if source.hub_config else "")
    return ForethoughtError(
        f"corpus '{source.name}' not found: looked in {source.data_root_tried}, and on the Hugging Face hub as "
        f"'{hub}' ({reason}). Set FORETHOUGHT_DATA to a data folder holding {_KNOWN[source.name].layout}."
    )


# ----------------------------------------------------------------------------------------------------------
# Reading text
# ----------------------------------------------------------------------------------------------------------


def load_corpus_text(name: str, split: str) -> str:
    """The text of one split (train/valid/test) of a corpus; raises ForethoughtError if missing or empty."""
    if split not in SPLITS:
        raise ForethoughtError(f"unknown split '{split}'; expected one of {', '.join(SPLITS)}")
    return _read_split(resolve_corpus(name), split)


def _read_split(source: CorpusSource, split: str) -> str:
    if source.kind == "generated":
        text = split_by_fraction(generated_corpus(), split)
    elif source.kind == "split_files":
        text = _read_text_file(source.paths[SPLITS.index(split)])
    elif source.kind == "single_file":
        text = split_by_fraction(_read_text_file(source.paths[0]), split)
    elif source.kind == "jsonl":
        p = source.paths[0]
        text = joined_documents(_jsonl_splits(str(p), p.stat().st_mtime_ns)[split])
    else:
        text = _hub_splits(source)[split]
    if not text.strip():
        raise ForethoughtError(f"corpus '{source.name}' has no text in its {split} split")
    return text


def split_by_fraction(text: str, split: str) -> str:
    """Split one text 90/10 by characters into train/valid; test is the valid part (nanoGPT's convention)."""
    cut = int(len(text) * TRAIN_FRACTION)
    return text[:cut] if split == "train" else text[cut:]


def split_documents(docs: list[str]) -> dict[str, list[str]]:
    """Whole documents into train / valid / test: the last ``min(HELDOUT_DOCUMENTS, max(2, n // 10))`` documents
    are held out, their first half (rounded down) valid and the rest test; every other document trains. Needs
    three documents at least."""
    n = len(docs)
    if n < 3:
        raise ForethoughtError(f"a corpus of documents needs at least 3 documents (train, valid, test), got {n}")
    held = min(HELDOUT_DOCUMENTS, max(2, n // 10))
    cut, half = n - held, n - held + held // 2
    return {"train": docs[:cut], "valid": docs[cut:half], "test": docs[half:]}


@functools.lru_cache(maxsize=2)
def _jsonl_splits(path: str, mtime_ns: int) -> dict[str, list[str]]:
    """A JSON-lines file of documents, split by documents (read once per file version and process)."""
    docs = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                raise ForethoughtError(f"corpus file {path} line {i} is not JSON (one JSON object per line, its "
                                       "document in 'text')") from None
            if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                raise ForethoughtError(f"corpus file {path} line {i} has no 'text' string (one JSON object per "
                                       "line, its document in 'text')")
            docs.append(_document(row["text"]))
    return split_documents(docs)


def joined_documents(docs: list[str]) -> str:
    """The text of a split of a corpus of documents: each document followed by :data:`DOC_SEP`."""
    return "".join(d + DOC_SEP for d in docs)


def _document(text: str) -> str:
    """One document as a corpus of documents keeps it: no separator inside, no trailing whitespace."""
    return text.replace(DOC_SEP, " ").rstrip()


def _read_text_file(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ForethoughtError(f"corpus file {path} is not UTF-8 text ({e.reason} at byte {e.start})") from e
    except OSError as e:
        raise ForethoughtError(f"cannot read corpus file {path}: {e.strerror or e}") from e



@functools.lru_cache(maxsize=8)
def _hub_splits(source: CorpusSource) -> dict[str, str]:
    """Download a hub dataset once per process and return its text per split (train/valid/test)."""
    if not datasets_available():
        if source.data_root_tried is not None:
            raise _not_found(source, "the 'datasets' package is not installed")
        raise ForethoughtError(
            f"corpus '{source.name}' needs the 'datasets' package (pip install 'forethought[hub]'), "
            "which is not installed"
        )
    try:
        loaded = load_hub_dataset(source.hub_id, source.hub_config)
    except Exception as e:  # datasets raises many types (network, missing config, ...)
        reason = first_line(e)
        if source.data_root_tried is not None:
            raise _not_found(source, f"loading failed: {reason}") from e
        raise ForethoughtError(f"cannot load hub dataset for corpus '{source.name}': {reason}") from e

    def column(split_name: str) -> str:
        ds = loaded[split_name]
        if "text" not in ds.column_names:
            cols = ", ".join(ds.column_names)
            raise ForethoughtError(f"hub dataset '{source.hub_id}' has no 'text' column (columns: {cols})")
        return "\n".join(str(t).rstrip("\n") for t in ds["text"])

    names = list(loaded.keys())
    if source.name == "openwebtext":  # one split of documents: held out by whole documents
        docs = split_documents([_document(str(t)) for t in loaded["train"]["text"]])
        return {s: joined_documents(docs[s]) for s in SPLITS}
    if source.name == "tinyshakespeare":
        # The hub copy is the same file cut into three parts; rejoin it and split 90/10 like the local file.
        whole = "".join(column(s) for s in ("train", "validation", "test") if s in names)
        return {s: split_by_fraction(whole, s) for s in SPLITS}
    if source.name == "tinystories":
        # The local file is the head of the validation split; use that split here too, stories separated by a
        # blank line as in the local file.
        ds = loaded["validation"]
        whole = "\n\n".join(str(t).strip() for t in ds["text"])
        return {s: split_by_fraction(whole, s) for s in SPLITS}

    def find(*candidates: str) -> str | None:
        return next((c for c in candidates if c in names), None)

    train = find("train")
    valid = find("validation", "valid", "dev")
    test = find("test")
    if train is None:
        raise ForethoughtError(f"hub dataset '{source.hub_id}' has no train split (splits: {', '.join(names)})")
    if valid is None:
        whole = column(train)
        return {s: split_by_fraction(whole, s) for s in SPLITS}
    return {"train": column(train), "valid": column(valid), "test": column(test or valid)}


# ----------------------------------------------------------------------------------------------------------
# Token arrays
# ----------------------------------------------------------------------------------------------------------


def token_array(corpus: str, split: str, tokenizer_spec: str, cache_dir: Path) -> np.ndarray:
    """Token ids of one corpus split, tokenised once and then memory-mapped from a ``.npy`` cache.

    The cache key holds the corpus (files by path, mtime and size; hub id; or the generated version), the
    split and the tokenizer spec, so editing a corpus file invalidates it. ``bpe:N`` tokenizers are trained on
    the corpus's train split. dtype is uint16 when the vocabulary fits, else uint32.

    Tokenisation scheme:

    - WikiText (``wikitext-2``): each non-blank line is a paragraph or heading, i.e. one document. Each is
      encoded on its own (trailing whitespace dropped, the leading space kept) and followed by the eos token, so
      the model sees a document boundary where the original `<eos>` markers stood.
    - Corpora of documents (``openwebtext``, ``.jsonl`` files): each document (newlines and all) is encoded on
      its own and followed by the eos token.
    - Everything else is one running text: it is cut after newlines into chunks of about 8k characters,
      the chunks are batch-encoded and concatenated, with no eos inserted. For byte-level BPEs (GPT-2, the
      trained ``bpe:N``, SmolLM2) this gives the same ids as encoding the whole text at once, because their
      pre-tokenisers already split at newlines. TinyStories stories contain blank lines themselves, so their
      boundaries cannot be recovered and no eos is inserted there either.

    No special tokens (bos) are added by the tokenizer.
    """
    if split not in SPLITS:
        raise ForethoughtError(f"unknown split '{split}'; expected one of {', '.join(SPLITS)}")
    source = resolve_corpus(corpus)
    key = {
        "version": _TOKEN_CACHE_VERSION,
        "corpus": source.fingerprint(),
        "split": split,
        "tokenizer": tokenizer_spec,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = Path(cache_dir) / "tokens" / f"{_slug(source.name)}.{split}.{_slug(tokenizer_spec)}.{digest}.npy"
    if path.is_file():
        try:
            return np.load(path, mmap_mode="r")
        except (ValueError, OSError):
            path.unlink(missing_ok=True)  # unreadable (e.g. disk trouble): rebuild below

    from forethought.data.tokenizers import load_tokenizer  # lazy: pulls in transformers

    train_text = _read_split(source, "train") if tokenizer_spec.startswith("bpe:") else None
    tokenizer = load_tokenizer(tokenizer_spec, corpus_text=train_text, cache_dir=Path(cache_dir) / "tokenizers")
    ids = encode_text(_read_split(source, split), tokenizer, documents=source.documents)
    buf = io.BytesIO()
    np.save(buf, ids, allow_pickle=False)
    atomic_write_bytes(path, buf.getvalue())
    return np.load(path, mmap_mode="r")


def encode_text(
    text: str, tokenizer: PreTrainedTokenizerBase, documents: bool = False, chunk_chars: int = 8192
) -> np.ndarray:
    """Batch-encode a text as described in :func:`token_array` (documents: eos after each; the documents are the
    pieces between :data:`DOC_SEP` when the text has one, else one per line)."""
    vocab = len(tokenizer)
    dtype = np.uint16 if vocab < 65536 else np.uint32
    if documents:
        if tokenizer.eos_token_id is None:
            raise ForethoughtError("the tokenizer has no eos token to separate documents with")
        lines = text.split(DOC_SEP) if DOC_SEP in text else text.splitlines()
        pieces = [line.rstrip() for line in lines if line.strip()]
    else:
        pieces = _newline_chunks(text, chunk_chars)
    out: list[np.ndarray] = []
    batch = 512
    for start in range(0, len(pieces), batch):
        encoded = tokenizer(pieces[start : start + batch], add_special_tokens=False, verbose=False)["input_ids"]
        for ids in encoded:
            if documents:
                ids = [*ids, tokenizer.eos_token_id]
            out.append(np.asarray(ids, dtype=np.int64))
    if not out:
        return np.zeros(0, dtype=dtype)
    flat = np.concatenate(out)
    if flat.size and (flat.min() < 0 or flat.max() > np.iinfo(dtype).max):
        raise ForethoughtError(f"token id {int(flat.max())} does not fit in {np.dtype(dtype).name}")
    return flat.astype(dtype)


def _newline_chunks(text: str, chunk_chars: int) -> list[str]:
    """Cut text into pieces of about chunk_chars, only right after a newline (one long line stays whole)."""
    chunks: list[str] = []
    start = 0
    n = len(text)
    while start < n:
        end = start + chunk_chars
        if end >= n:
            chunks.append(text[start:])
            break
        newline = text.find("\n", end)
        if newline == -1:
            chunks.append(text[start:])
            break
        chunks.append(text[start : newline + 1])
        start = newline + 1
    return chunks


def _slug(s: str) -> str:
    """A short file-name-safe rendering of a corpus name or tokenizer spec (the hash makes names unique)."""
    base = Path(s).name if ("/" in s and not s.startswith("hf:")) else s
    return re.sub(r"[^A-Za-z0-9._-]+", "_", base).strip("._")[:40] or "x"


# ----------------------------------------------------------------------------------------------------------
# The generated corpus
# ----------------------------------------------------------------------------------------------------------

_NAMES = (
    "Anna", "Ben", "Clara", "David", "Ella", "Felix", "Grace", "Henry", "Iris", "Jack", "Kate", "Leo", "Mia",
    "Noah", "Olive", "Paul", "Rosa", "Sam", "Tara", "Victor", "Wendy", "Yusuf", "Zoe", "Omar",
)  # fmt: skip
_PRONOUNS = {"she": ("she", "her", "her"), "he": ("he", "him", "his")}
_GENDER = dict.fromkeys(("Anna", "Clara", "Ella", "Grace", "Iris", "Kate", "Mia", "Olive", "Rosa", "Tara",
                         "Wendy", "Zoe"), "she")  # fmt: skip
_PLACES = (
    "the old harbour", "the village market", "the quiet library", "the forest path", "the river bank",
    "the small bakery", "the hill above the town", "the train station", "the school garden", "the empty beach",
    "the busy square", "the lighthouse", "the farm by the lake", "the museum", "the bridge", "the workshop",
)  # fmt: skip
_OBJECTS = (
    "a red kite", "a silver key", "an old map", "a wooden box", "a blue notebook", "a broken clock",
    "a letter", "a small lamp", "a basket of apples", "a green umbrella", "a paper boat", "a brass compass",
    "a loaf of bread", "a warm coat", "a bright stone", "a long rope", "a tin whistle", "a jar of honey",
)  # fmt: skip
_ANIMALS = (  # (singular, plural)
    ("dog", "dogs"), ("cat", "cats"), ("fox", "foxes"), ("owl", "owls"), ("horse", "horses"),
    ("rabbit", "rabbits"), ("goat", "goats"), ("duck", "ducks"), ("crow", "crows"), ("mouse", "mice"),
    ("bear", "bears"), ("deer", "deer"),
)  # fmt: skip
_BODY = (("hands", ("cold", "dirty", "warm", "sore", "steady")), ("feet", ("cold", "wet", "sore", "tired")),
         ("eyes", ("bright", "tired", "wide", "heavy")))  # fmt: skip
_ADJECTIVES = (
    "happy", "tired", "curious", "careful", "brave", "quiet", "hungry", "proud", "worried", "calm", "cheerful",
    "patient", "clever", "gentle", "lonely", "busy", "surprised", "kind", "sleepy", "excited",
)  # fmt: skip
_WEATHER = (
    "The sun was warm", "A cold wind came from the sea", "Rain fell all morning", "The sky was grey and low",
    "Snow covered the roofs", "The air smelled of grass", "Fog hid the far side of the river",
    "It was a clear and bright day",
)  # fmt: skip
# (present, past) pairs; transitive verbs take an object.
_TRANSITIVE = (
    ("find", "found"), ("carry", "carried"), ("open", "opened"), ("fix", "fixed"), ("paint", "painted"),
    ("hide", "hid"), ("lose", "lost"), ("clean", "cleaned"), ("share", "shared"), ("sell", "sold"),
    ("buy", "bought"), ("draw", "drew"), ("hold", "held"), ("give away", "gave away"), ("keep", "kept"),
)  # fmt: skip
_INTRANSITIVE = (
    ("walk", "walked"), ("run", "ran"), ("wait", "waited"), ("sing", "sang"), ("laugh", "laughed"),
    ("rest", "rested"), ("listen", "listened"), ("smile", "smiled"), ("think", "thought"), ("sit", "sat"),
)  # fmt: skip
_ADVERBS = ("slowly", "quickly", "quietly", "happily", "carefully", "suddenly", "again", "for a while", "at once")
_TIMES = ("In the morning", "At noon", "Later that day", "In the evening", "That night", "The next day", "Soon")
_CONNECT = ("Then", "After that", "A little later", "Meanwhile", "Before long", "At last")
_REASONS = (
    "because it was getting late", "because a friend needed help", "because the shops were closing",
    "because the path was long", "because the weather was changing", "because it felt like the right thing",
)  # fmt: skip


@functools.lru_cache(maxsize=4)
def generated_corpus(n_chars: int = 200_000, seed: int = 0) -> str:
    """A deterministic English-like text of at most n_chars characters, for tests and demos without data.

    Paragraphs are short stories generated from a small grammar (a few hundred words): each has a main
    character (with matching pronouns), a place, an object and an animal that recur across its sentences,
    and it ends with a closing line. So the text has local syntax plus paragraph-long dependencies that a
    model can learn to anticipate. Paragraphs are separated by a blank line; the text ends at a paragraph
    boundary. ``random.Random(seed)`` makes it identical on every run and Python 3 version.
    """
    if n_chars <= 0:
        raise ForethoughtError(f"generated corpus size must be positive, got {n_chars}")
    rng = random.Random(seed)
    paragraphs: list[str] = []
    total = 0
    while True:
        para = _story(rng)
        extra = len(para) + (2 if paragraphs else 0)
        if total + extra > n_chars:
            if not paragraphs:  # n_chars smaller than one story: cut it at a sentence end if possible
                cut = para.rfind(". ", 0, n_chars)
                return para[: cut + 1] if cut > 0 else para[:n_chars]
            break
        paragraphs.append(para)
        total += extra
    return "\n\n".join(paragraphs) + ("\n" if total < n_chars else "")


def _story(rng: random.Random) -> str:
    name = rng.choice(_NAMES)
    subj, obj, poss = _PRONOUNS[_GENDER.get(name, "he")]
    friend = rng.choice([n for n in _NAMES if n != name])
    place = rng.choice(_PLACES)
    thing = rng.choice(_OBJECTS)
    the_thing = "the " + thing.split(" ", 1)[1]
    animal, animals = rng.choice(_ANIMALS)
    adjective = rng.choice(_ADJECTIVES)

    def cap(s: str) -> str:
        return s[0].upper() + s[1:]

    sentences = [f"{rng.choice(_WEATHER)} when {name} went to {place}."]
    sentences.append(f"{cap(subj)} was {adjective} and carried {thing}.")
    for _ in range(rng.randint(2, 5)):
        kind = rng.randrange(6)
        if kind == 0:
            verb = rng.choice(_TRANSITIVE)[1]
            sentences.append(f"{rng.choice(_CONNECT)}, {subj} {verb} {the_thing} {rng.choice(_ADVERBS)}.")
        elif kind == 1:
            verb = rng.choice(_INTRANSITIVE)[1]
            sentences.append(f"{rng.choice(_TIMES)}, {name} {verb} near {place} {rng.choice(_REASONS)}.")
        elif kind == 2:
            sentences.append(f"A {rng.choice(_ADJECTIVES)} {animal} watched {obj} from a distance.")
        elif kind == 3:
            verb = rng.choice(_TRANSITIVE)[0]
            sentences.append(f'"Can you help me {verb} {the_thing}?" {name} asked {friend}.')
            sentences.append(f'"Of course," said {friend}, and they did it together.')
        elif kind == 4:
            body_part, states = rng.choice(_BODY)
            sentences.append(f"{cap(poss)} {body_part} were {rng.choice(states)}, but {subj} did not stop.")
        else:
            count = rng.randint(2, 9)
            sentences.append(f"There were {count} {animals} by {place}, and {name} counted them twice.")
    ending = rng.randrange(3)
    if ending == 0:
        sentences.append(f"When the day was over, {name} went home with {the_thing}.")
    elif ending == 1:
        sentences.append(f"In the end, {name} gave {the_thing} to {friend} and felt {rng.choice(_ADJECTIVES)}.")
    else:
        sentences.append(f"{name} never forgot the {animal} at {place}.")
    return " ".join(sentences)


def eval_windows(tokens: np.ndarray, n: int, length: int) -> torch.Tensor:
    """Non-overlapping windows from the start of a split (deterministic; as many as fit, at most n): (n, length)."""
    n = min(n, len(tokens) // length)
    # a copy: an int64 memory-mapped split would otherwise give a tensor over read-only memory
    return torch.from_numpy(np.array(tokens[:n * length], dtype=np.int64).reshape(n, length))


def spread_windows(tokens: np.ndarray, n: int, length: int, spread: str = "even", seed: int = 0
                   ) -> tuple[torch.Tensor, np.ndarray]:
    """``n`` non-overlapping windows of ``length`` tokens drawn across a whole split: (n, length) int64 and their
    token offsets (n,). The split is cut into its ``len(tokens) // length`` aligned windows (offsets at multiples
    of ``length``: with the planted corpus, its documents) and ``n`` of them are taken: ``even`` = evenly spaced
    from the first to the last, ``random`` = a seeded random subset (numpy ``default_rng(seed)``, in split
    order), ``first`` = the first ``n`` (what :func:`eval_windows` gives)."""
    if length <= 0:
        raise ForethoughtError(f"window length must be > 0, got {length}")
    count = len(tokens) // length
    if n < 1 or n > count:
        raise ForethoughtError(f"the split holds {count} windows of {length} tokens; {n} asked")
    if spread == "even":
        idx = np.unique(np.round(np.linspace(0, count - 1, n)).astype(np.int64))  # unique: n <= count
    elif spread == "random":
        idx = np.sort(np.random.default_rng(seed).choice(count, size=n, replace=False))
    elif spread == "first":
        idx = np.arange(n)
    else:
        raise ForethoughtError(f"unknown spread '{spread}'; expected even, random or first")
    offsets = idx * length
    windows = np.stack([np.asarray(tokens[o:o + length], dtype=np.int64) for o in offsets])
    return torch.from_numpy(windows), offsets


def window_slots(n_tokens: int, n: int, length: int, g: torch.Generator, align: int = 1) -> np.ndarray:
    """The slots (start // ``align``) of ``random_windows``' windows, drawn the same way: (n,) int64 in
    [0, (n_tokens - length) // align]."""
    return torch.randint(0, (n_tokens - length) // align + 1, (n,), generator=g).numpy()


def random_windows(tokens: np.ndarray, n: int, length: int, g: torch.Generator, align: int = 1) -> torch.Tensor:
    """``n`` windows of ``length`` tokens at uniform random starts (every start, the last one included), starts
    restricted to multiples of ``align`` (``align`` = the document length of a corpus of equal-length documents
    keeps windows on document starts): (n, length)."""
    return windows_at(tokens, window_slots(len(tokens), n, length, g, align) * align, length)


def windows_at(tokens: np.ndarray, starts: Iterable[int], length: int) -> torch.Tensor:
    """The windows of ``length`` tokens at ``starts``: (len(starts), length) int64."""
    return torch.from_numpy(np.stack([np.asarray(tokens[s:s + length], dtype=np.int64) for s in starts]))


def load_token_splits(corpus: str, tokenizer_spec: str, cache_dir: Path, min_tokens: int,
                      what: str) -> tuple[np.ndarray, np.ndarray]:
    """Train and valid token arrays of a corpus, each checked to hold at least ``min_tokens`` tokens (``what``
    names the setting that needs them, for the error)."""
    out = []
    for split in ("train", "valid"):
        arr = token_array(corpus, split, tokenizer_spec, cache_dir)
        if len(arr) < min_tokens:
            raise ForethoughtError(f"corpus '{corpus}' {split} split has {len(arr)} tokens; need at least "
                                   f"{min_tokens} for {what}")
        out.append(arr)
    return out[0], out[1]


# ----------------------------------------------------------------------------------------------------------
# Passages: one sequence per document (MS MARCO as the myopia paper read it)
# ----------------------------------------------------------------------------------------------------------

# MS MARCO's passage collection: under the data root as MS MARCO's collection.tsv (pid <tab> passage) or BEIR's
# corpus.jsonl (one {"_id", "title", "text"} per line, the reference code's source), else the hub copy.
MSMARCO = "msmarco"
MSMARCO_FILES = ("msmarco/collection.tsv", "msmarco/corpus.jsonl")
MSMARCO_HUB = ("sentence-transformers/msmarco-corpus", "passage")
PASSAGE_ORDER_SEED = 1729  # the reference shuffles its passages once with datasets' shuffle(seed=1729)
PASSAGE_SPLIT = (0.9, 0.01)  # train, valid fractions of the shuffled passages (the reference's; the rest: test)
_PASSAGE_CACHE_VERSION = 1


def _passages_file(path: Path) -> list[str]:
    """One passage per line: ``.jsonl`` its ``text`` field, ``.tsv`` its last column, anything else the line."""
    lines = [line for line in _read_text_file(path).splitlines() if line.strip()]
    if path.suffix == ".jsonl":
        try:
            return [str(json.loads(line)["text"]) for line in lines]
        except (ValueError, KeyError, TypeError) as e:
            raise ForethoughtError(f"{path}: every line must be a JSON object with a 'text' field ({e})") from None
    if path.suffix == ".tsv":
        return [line.rsplit("\t", 1)[-1] for line in lines]
    return lines


def _passage_source(corpus: str) -> tuple[str, Path | None, tuple[str, str | None] | None]:
    """(what to call it, a local file, or a hub (id, config)) for a passage corpus name."""
    if corpus == MSMARCO:
        root = data_root()
        for rel in MSMARCO_FILES:
            if root is not None and (root / rel).is_file():
                return corpus, root / rel, None
        reason = hub_dataset_unavailable_reason()
        if reason is not None:
            raise _msmarco_missing(reason)
        return corpus, None, MSMARCO_HUB
    if corpus.startswith("hf:"):
        hub_id, _, config = corpus[3:].partition(":")
        return corpus, None, (hub_id, config or None)
    path = Path(corpus).expanduser()
    if not path.is_file():
        raise ForethoughtError(f"passage corpus '{corpus}': not 'msmarco', 'hf:<id>[:<config>]' or a file (one "
                               "passage per line: .txt, .tsv (last column) or .jsonl (a 'text' field))")
    return corpus, path, None


def _msmarco_missing(reason: str) -> ForethoughtError:
    root = data_root()
    where = f"{root}" if root is not None else "the data root (FORETHOUGHT_DATA is not set)"
    return ForethoughtError(
        f"corpus 'msmarco' not found: looked in {where} for {' or '.join(MSMARCO_FILES)}, and on the Hugging Face "
        f"hub as '{MSMARCO_HUB[0]}' (config {MSMARCO_HUB[1]}; {reason}). Place MS MARCO's collection.tsv or "
        "BEIR's corpus.jsonl in <FORETHOUGHT_DATA>/msmarco/")


def passage_texts(corpus: str) -> list[str]:
    """Every passage of a passage corpus, in the source's order."""
    _, path, hub = _passage_source(corpus)
    if path is not None:
        return _passages_file(path)
    try:
        loaded = load_hub_dataset(*hub)
    except Exception as e:  # datasets raises many types
        if corpus == MSMARCO:
            raise _msmarco_missing(f"loading failed: {first_line(e)}") from e
        raise ForethoughtError(f"cannot load hub dataset '{hub[0]}' for corpus '{corpus}': {first_line(e)}") from e
    split = "train" if "train" in loaded else next(iter(loaded))
    if "text" not in loaded[split].column_names:
        raise ForethoughtError(f"hub dataset '{hub[0]}' has no 'text' column ({', '.join(loaded[split].column_names)})")
    return [str(t) for t in loaded[split]["text"]]


def first_tokens(passages: list[str], tokenizer: PreTrainedTokenizerBase, length: int) -> np.ndarray:
    """(N, length): each passage's first ``length`` tokens (no special tokens), passages shorter than that dropped
    (the reference tokenises with truncation at ``length`` and drops every padded row)."""
    dtype = np.uint16 if len(tokenizer) < 65536 else np.uint32
    rows = []
    for start in range(0, len(passages), 1024):
        encoded = tokenizer(passages[start:start + 1024], add_special_tokens=False, truncation=True,
                            max_length=length, verbose=False)["input_ids"]
        rows += [ids for ids in encoded if len(ids) == length]
    return np.asarray(rows, dtype=dtype).reshape(len(rows), length)


def passage_sequences(corpus: str, tokenizer_spec: str, cache_dir: Path, length: int
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Train and valid sequences of a passage corpus as the myopia paper read MS MARCO: the passages in the order
    of one fixed shuffle (numpy's ``default_rng(1729).permutation``, which is datasets' ``shuffle(seed=1729)``),
    each cut to its first ``length`` tokens, shorter ones dropped, then the first 90 % for training and the next
    1 % for validation. Cached as ``.npy`` (N, length) arrays; training reads them in order, once."""
    name, path, hub = _passage_source(corpus)
    fingerprint = ([str(path.resolve()), path.stat().st_mtime_ns, path.stat().st_size] if path is not None
                   else list(hub))
    key = {"version": _PASSAGE_CACHE_VERSION, "corpus": fingerprint, "tokenizer": tokenizer_spec, "length": length}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    paths = [Path(cache_dir) / "passages" / f"{_slug(name)}.{s}.{_slug(tokenizer_spec)}.{digest}.npy"
             for s in ("train", "valid")]
    if not all(p.is_file() for p in paths):
        from forethought.data.tokenizers import load_tokenizer  # lazy: pulls in transformers

        if tokenizer_spec.startswith("bpe:"):
            raise ForethoughtError("passage corpora need a pretrained tokenizer (e.g. gpt2), not a trained bpe:N")
        texts = passage_texts(corpus)
        texts = [texts[i] for i in np.random.default_rng(PASSAGE_ORDER_SEED).permutation(len(texts))]
        tokenizer = load_tokenizer(tokenizer_spec, cache_dir=Path(cache_dir) / "tokenizers")
        rows = first_tokens(texts, tokenizer, length)
        n_train = int(len(rows) * PASSAGE_SPLIT[0])
        n_valid = max(1, int(len(rows) * PASSAGE_SPLIT[1]))
        for p, part in zip(paths, (rows[:n_train], rows[n_train:n_train + n_valid]), strict=True):
            buf = io.BytesIO()
            np.save(buf, part, allow_pickle=False)
            atomic_write_bytes(p, buf.getvalue())
    train, valid = (np.load(p, mmap_mode="r") for p in paths)
    if len(train) == 0 or len(valid) == 0:
        raise ForethoughtError(f"passage corpus '{corpus}': {len(train)} train and {len(valid)} valid passages of at "
                               f"least {length} tokens; need at least one of each")
    return train, valid


def vocab_size_for(*arrays: np.ndarray, tokenizer: PreTrainedTokenizerBase | None = None) -> int:
    """A model's vocabulary: every id seen in the token arrays and every id the tokenizer can produce."""
    seen = max(int(a.max()) for a in arrays) + 1
    return max(seen, len(tokenizer)) if tokenizer is not None else seen
