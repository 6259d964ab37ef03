"""Shared fixtures: an isolated environment for tests of data loading (no data root, no hub, a private cache)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from forethought.data import corpora

if os.environ.get("PYTEST_XDIST_WORKER"):  # `make test` runs one worker per core: one thread each, as do their
    torch.set_num_threads(1)               # subprocesses, so none oversubscribe
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache per module, so the GPT-2 tokenizer is converted once for all tests of that module."""
    return tmp_path_factory.mktemp("forethought-cache")


@pytest.fixture
def isolated_env(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    """No data root, no home-dir cache and no hub access unless a test sets them."""
    monkeypatch.delenv("FORETHOUGHT_DATA", raising=False)
    monkeypatch.setenv("FORETHOUGHT_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    corpora._hub_splits.cache_clear()
