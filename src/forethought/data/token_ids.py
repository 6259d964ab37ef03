"""Pre-tokenised corpora: token-id arrays and datasets with an ``input_ids`` column, read as train / valid splits.

A corpus named ``ids:<source>`` is already tokenised (the myopia paper's Pythia runs read 64-token Pile sequences
tokenised with Pythia's tokenizer). The source is one of:

* a ``.npy`` file: a 1-D token stream, or 2-D rows ``(N, L)`` (one sequence per row);
* a ``.bin`` file: a raw 1-D stream of little-endian uint16 ids (nanoGPT's and GPT-NeoX's token files; Pythia's
  vocabulary of 50,304 fits in 16 bits), or ``uint32`` when the name ends in ``.u32.bin``;
* a path relative to the working directory, else to the data root (``FORETHOUGHT_DATA``);
* a folder holding ``train`` and ``valid`` (or ``validation``) files of those kinds;
* a folder written by ``datasets``' ``save_to_disk`` (the reference's ``pile_PYTHIA_64tokens_20M``), or
  ``hf:<dataset id>`` from the hub: its ``input_ids`` column (``Tokens``, the name in EleutherAI's Pythia samples,
  is read too), rows of equal length kept as rows.

A source without its own validation split gives its last 1 % (at least one row; rows are never cut) to it.
Rows of one length are returned as ``(N, L)``; everything else as a 1-D stream. Nothing is tokenised here, so the
tokenizer a run names must be the one the ids came from (checked: every id must be below its vocabulary).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from forethought.core.env import data_root, datasets_available, hub_dataset_unavailable_reason, load_hub_dataset
from forethought.core.errors import ForethoughtError
from forethought.data.corpora import windows_at

PREFIX = "ids:"
COLUMNS = ("input_ids", "Tokens")  # the column name, then the one EleutherAI's Pythia samples use
VALID_NAMES = ("valid", "validation", "test")
HELD_OUT = 0.01  # the share of a source without a validation split that becomes one


def is_token_ids(corpus: str) -> bool:
    """Whether a corpus name points at pre-tokenised data (``ids:<source>``)."""
    return corpus.startswith(PREFIX)


@dataclass(frozen=True)
class TokenIds:
    """The two splits of a pre-tokenised corpus: each (N, L) rows or an (n,) stream of int64 ids."""

    train: np.ndarray
    valid: np.ndarray

    @property
    def row_len(self) -> int:
        """Tokens per row when both splits are rows of one length, else 0 (streams)."""
        if self.train.ndim == 2 and self.valid.ndim == 2 and self.train.shape[1] == self.valid.shape[1]:
            return int(self.train.shape[1])
        return 0

    def streams(self) -> tuple[np.ndarray, np.ndarray]:
        """Both splits as 1-D streams (rows one after the other: a window of row_len tokens at a multiple of
        row_len is one row)."""
        return self.train.reshape(-1), self.valid.reshape(-1)


def hold_out(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(train, valid): the last 1 % of rows (2-D) or tokens (1-D) held out, at least one row / token each side."""
    n = len(arr)
    if n < 2:
        raise ForethoughtError(f"{n} row(s) of token ids: need at least 2 to hold one out for validation")
    cut = n - max(1, int(n * HELD_OUT))
    return arr[:cut], arr[cut:]


def _checked(arr: np.ndarray, where: str) -> np.ndarray:
    if arr.ndim not in (1, 2) or arr.size == 0:
        raise ForethoughtError(f"{where}: token ids must be a non-empty 1-D stream or 2-D rows, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise ForethoughtError(f"{where}: token ids must be integers, got {arr.dtype}")
    if int(arr.min()) < 0:
        raise ForethoughtError(f"{where}: negative token id {int(arr.min())}")
    return arr


def read_array(path: Path) -> np.ndarray:
    """One ``.npy`` (memory-mapped) or ``.bin`` file of token ids."""
    if not path.is_file():
        raise ForethoughtError(f"token-id file {path} not found")
    try:
        if path.suffix == ".npy":
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        elif path.suffix == ".bin":
            dtype = np.uint32 if path.name.endswith(".u32.bin") else np.uint16
            if path.stat().st_size % np.dtype(dtype).itemsize:
                raise ForethoughtError(f"{path}: size is not a whole number of {np.dtype(dtype).name} ids")
            arr = np.memmap(path, dtype=dtype, mode="r")
        else:
            raise ForethoughtError(f"token-id file {path}: expected .npy or .bin")
    except (ValueError, OSError) as e:
        raise ForethoughtError(f"{path}: not a readable token-id array ({e})") from None
    return _checked(arr, str(path))


def _split_file(folder: Path, names: tuple[str, ...]) -> Path | None:
    for name in names:
        for suffix in (".npy", ".u32.bin", ".bin"):
            if (folder / f"{name}{suffix}").is_file():
                return folder / f"{name}{suffix}"
    return None


def column_rows(rows: list, where: str) -> np.ndarray:
    """A dataset column of id lists -> (N, L) int64 when every row has one length, else the rows joined (1-D)."""
    if not rows:
        raise ForethoughtError(f"{where}: no rows")
    lengths = {len(r) for r in rows}
    if len(lengths) == 1:
        return _checked(np.asarray(rows, dtype=np.int64), where)
    return _checked(np.concatenate([np.asarray(r, dtype=np.int64) for r in rows]), where)


def dataset_splits(ds: object, where: str) -> TokenIds:
    """A ``datasets`` Dataset or DatasetDict -> its train and validation splits' id column."""
    splits = dict(ds) if hasattr(ds, "keys") else {"train": ds}  # a DatasetDict is a mapping of splits
    if "train" not in splits:
        raise ForethoughtError(f"{where}: no 'train' split (splits: {', '.join(splits) or 'none'})")

    def ids(split: object, name: str) -> np.ndarray:
        column = next((c for c in COLUMNS if c in split.column_names), None)
        if column is None:
            raise ForethoughtError(f"{where}: split '{name}' has no {' or '.join(COLUMNS)} column (columns: "
                                   f"{', '.join(split.column_names)})")
        return column_rows(split[column], f"{where} ({name})")

    train = ids(splits["train"], "train")
    valid_name = next((n for n in VALID_NAMES if n in splits), None)
    if valid_name is None:
        return TokenIds(*hold_out(train))
    return TokenIds(train, ids(splits[valid_name], valid_name))


@functools.lru_cache(maxsize=4)  # a run reads its splits once, whoever asks (a hub download, a big memory map)
def read_token_ids(corpus: str) -> TokenIds:
    """The train and valid splits of ``ids:<source>`` (see the module's docstring)."""
    if not is_token_ids(corpus):
        raise ForethoughtError(f"'{corpus}' is not a pre-tokenised corpus (ids:<file | folder | hf:dataset>)")
    source = corpus[len(PREFIX):].strip()
    if not source:
        raise ForethoughtError("ids: needs a source: a .npy / .bin file, a folder or hf:<dataset>")
    if source.startswith("hf:"):
        reason = hub_dataset_unavailable_reason()
        if reason:
            raise ForethoughtError(f"{corpus}: cannot load a hub dataset ({reason})")
        try:
            ds = load_hub_dataset(source[3:])
        except Exception as e:  # noqa: BLE001 - the hub's errors are many; one line names the source
            raise ForethoughtError(f"{corpus}: could not load the dataset ({type(e).__name__}: {e})".splitlines()[0]
                                   ) from None
        return dataset_splits(ds, corpus)
    path = Path(source).expanduser()
    root = data_root()
    if not path.exists() and not path.is_absolute() and root is not None and (root / path).exists():
        path = root / path  # a name under the data root, as the named corpora are
    if path.is_file():
        return TokenIds(*hold_out(read_array(path)))
    if not path.is_dir():
        raise ForethoughtError(f"{corpus}: {path} not found (neither a token-id file nor a folder)")
    train = _split_file(path, ("train",))
    if train is not None:
        valid = _split_file(path, VALID_NAMES)
        return TokenIds(*hold_out(read_array(train))) if valid is None else TokenIds(read_array(train),
                                                                                    read_array(valid))
    if (path / "dataset_dict.json").is_file() or (path / "dataset_info.json").is_file():
        if not datasets_available():
            raise ForethoughtError(f"{corpus}: {path} is a saved dataset; reading it needs the 'datasets' package")
        import datasets

        return dataset_splits(datasets.load_from_disk(str(path)), corpus)
    raise ForethoughtError(f"{corpus}: folder {path} holds neither train.npy / train.bin nor a saved dataset")


def check_vocabulary(data: TokenIds, vocab_size: int, tokenizer: str) -> None:
    """Every id must be one the tokenizer's vocabulary has: ids from another tokenizer would train silently."""
    top = max(int(data.train.max()), int(data.valid.max()))
    if top >= vocab_size:
        raise ForethoughtError(f"token id {top} is outside tokenizer '{tokenizer}''s vocabulary of {vocab_size}: "
                               "name the tokenizer the ids were made with (--data.tokenizer)")


def token_id_streams(corpus: str, tokenizer: str, min_tokens: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    """``myopia lm``'s view of ``ids:<source>``: train and valid as 1-D int64 streams, each checked to hold at least
    ``min_tokens`` ids (``what`` names the setting that needs them). ``tokenizer`` must be the one the ids came
    from: a trained ``bpe:N`` tokenizer is made from a corpus's text, which pre-tokenised data does not have."""
    if tokenizer.startswith("bpe:"):
        raise ForethoughtError(f"corpus '{corpus}' is already tokenised: data.tokenizer must name the tokenizer its "
                               f"ids came from (an HF tokenizer id or folder, gpt2, or auto with an HF base), not "
                               f"'{tokenizer}'")
    data = read_token_ids(corpus)
    out = []
    for split, arr in zip(("train", "valid"), data.streams(), strict=True):
        if len(arr) < min_tokens:
            raise ForethoughtError(f"corpus '{corpus}' {split} split has {len(arr)} tokens; need at least "
                                   f"{min_tokens} for {what}")
        out.append(np.asarray(arr, dtype=np.int64))
    return out[0], out[1]


def row_align(corpus: str, length: int) -> int:
    """The start alignment for windows of ``length`` tokens: the row length when ``corpus`` is pre-tokenised rows
    of exactly that length (every window is then one whole row), else 1 (any start)."""
    if not is_token_ids(corpus):
        return 1
    return length if read_token_ids(corpus).row_len == length else 1


def ordered_rows(stream: np.ndarray, row_len: int, step: int, batch: int) -> torch.Tensor:
    """Batch ``step`` of one ordered pass over rows of ``row_len`` tokens joined in ``stream``: rows step·batch ..
    step·batch + batch − 1, wrapping around after the last (the reference's unshuffled DataLoader): (batch, row_len)
    int64."""
    n_rows = len(stream) // row_len
    rows = (np.arange(batch) + step * batch) % n_rows
    return windows_at(stream, rows * row_len, row_len)
