"""The PSF paper preset is the paper's run point by point: every setting of configs/psf/recipe_paper.yaml and
eval_paper.yaml against the table in docs/psf.md ("The paper preset"), the sizes counted on the meta device against
the paper's, OpenWebText read as documents with end-of-document tokens and a held-out document split, and a tiny
recipe on a local OpenWebText file with a T5-like tokenizer (a SentencePiece unigram model built here) whose
sampling loads the EMA weights."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from cli_harness import expect_clean_failure

from forethought.cli import CONFIG_DIR
from forethought.core.config import load_config
from forethought.core.errors import ForethoughtError
from forethought.data import corpora
from forethought.psf.config import EvalConfig, RecipeConfig, TokenFlowRunConfig

DOCS = Path(__file__).resolve().parents[1] / "docs" / "psf.md"
PRESETS = {"recipe": (RecipeConfig, CONFIG_DIR / "psf" / "recipe_paper.yaml"),
           "eval": (EvalConfig, CONFIG_DIR / "psf" / "eval_paper.yaml"),
           "flow": (TokenFlowRunConfig, CONFIG_DIR / "psf" / "token-flow_paper.yaml")}
TOLERANCE = 0.02  # our sizes within 2 % of the paper's


# ---- the docs table -------------------------------------------------------------------------------------------

def table_rows() -> list[dict[str, str]]:
    """The rows of docs/psf.md's paper-preset table: setting, paper, ours, source, why."""
    text = DOCS.read_text()
    start = text.index("<!-- paper-preset-table -->")
    end = text.index("<!-- end of paper-preset-table -->")
    rows = []
    for line in text[start:end].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("`"):
            rows.append(dict(zip(("setting", "paper", "ours", "source", "why"), cells, strict=True)))
    return rows


def expand(pattern: str) -> list[str]:
    """``a.{b,c.d}.e`` -> [a.b.e, a.c.d.e] (every brace group, in order)."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return [pattern]
    return [p for alt in m.group(1).split(",") for p in expand(pattern[:m.start()] + alt + pattern[m.end():])]


def matches(pattern: str, key: str) -> bool:
    """``*`` stands for one dotted segment."""
    rx = "\\.".join("[^.]+" if part == "*" else re.escape(part) for part in pattern.split("."))
    return re.fullmatch(rx, key) is not None


def leaves(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        return {k: v for key, sub in node.items() for k, v in leaves(sub, f"{prefix}{key}.").items()}
    return {prefix[:-1]: node}


def typed_value(cfg: Any, key: str) -> Any:
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def code(cell: str) -> str:
    m = re.fullmatch(r"`([^`]*)`(.*)", cell)
    assert m, f"not a `value` cell: {cell!r}"
    return m.group(1)


def test_every_setting_of_the_paper_presets_is_in_the_table_with_our_value() -> None:
    rows = table_rows()
    settings = [r for r in rows if not code(r["setting"]).startswith("size.")]
    assert len(settings) >= 30
    covered: dict[str, set[str]] = {name: set() for name in PRESETS}
    for row in settings:
        system, _, pattern = code(row["setting"]).partition(".")
        cls, path = PRESETS[system]
        cfg = load_config(cls, path)
        written = leaves(yaml.safe_load(path.read_text()))
        ours = yaml.safe_load(code(row["ours"]))
        keys = [k for p in expand(pattern) for k in written if matches(p, k)] if "*" in pattern else expand(pattern)
        assert keys, row["setting"]
        for key in keys:
            assert typed_value(cfg, key) == ours, (row["setting"], key, typed_value(cfg, key), ours)
            covered[system].add(key)
        assert row["paper"] and row["source"], row["setting"]
        if re.fullmatch(r"`[^`]*`", row["paper"]):  # a value: a reason is given exactly where ours differs
            same = yaml.safe_load(code(row["paper"])) == ours
            assert same == (not row["why"]), (row["setting"], "a differing value needs a reason, an equal one none")
    for system, (_, path) in PRESETS.items():
        missing = set(leaves(yaml.safe_load(path.read_text()))) - covered[system]
        assert not missing, f"{path.name}: settings without a row in docs/psf.md: {sorted(missing)}"


def paper_sizes() -> dict[str, int]:
    """Parameters of the paper preset's models, built on the meta device: decoder, prior, generation (the two, as
    the paper counts), AR baseline, encoder (not counted by the paper)."""
    from dataclasses import replace

    from forethought.data.tokenizers import KNOWN_VOCAB_SIZES
    from forethought.psf.ar import build_ar
    from forethought.psf.build import prior_for
    from forethought.psf.config import StageFeatures
    from forethought.psf.model import PSFModel
    from forethought.psf.recipe import trajectory_dim

    cfg = load_config(RecipeConfig, PRESETS["recipe"][1])
    V = KNOWN_VOCAB_SIZES[cfg.data.tokenizer]
    K = cfg.longer_blocks.blocks[-1]  # the headline model: the last K of the schedule, codes on
    with torch.device("meta"):
        model = PSFModel(replace(cfg.model, vocab_size=V), StageFeatures(landing=True, codes=True, blocks=K))
        prior = prior_for(model, cfg.prior.model, trajectory_dim(model, cfg.prior.model), K)
        ar = build_ar(cfg.ar.model, V, cfg.model.seq_len)
    n = model.num_params()
    prior_n = sum(p.numel() for p in prior.parameters())
    return {"decoder": n["decoder"], "prior": prior_n, "generation": n["decoder"] + prior_n, "encoder": n["encoder"],
            "ar": sum(p.numel() for p in ar.parameters())}


def test_sizes_match_the_paper_and_the_table() -> None:
    sizes = paper_sizes()
    rows = {code(r["setting"]): r for r in table_rows() if code(r["setting"]).startswith("size.")}
    assert set(rows) == {f"size.{k}" for k in sizes}
    for name, n in sizes.items():
        row = rows[f"size.{name}"]
        assert code(row["ours"]) == f"{n / 1e6:.1f}M", (name, n)
        paper = re.search(r"([\d.]+)M", row["paper"])
        if paper:  # the encoder has no paper value (not counted)
            assert abs(n / (float(paper.group(1)) * 1e6) - 1) <= TOLERANCE, (name, n, row["paper"])
    assert {k for k, r in rows.items() if re.search(r"[\d.]+M", r["paper"])} == {
        "size.decoder", "size.prior", "size.generation", "size.ar"}


def test_gpu_hours_table_covers_every_stage_of_the_preset() -> None:
    from forethought.psf.recipe import plan_stages

    cfg = load_config(RecipeConfig, PRESETS["recipe"][1])
    text = DOCS.read_text()
    block = text[text.index("<!-- paper-gpu-hours -->"):text.index("<!-- end of paper-gpu-hours -->")]
    stages = [line.split("|")[1].strip().strip("`") for line in block.splitlines() if line.startswith("| `")]
    assert stages == [s.name for s in plan_stages(cfg)]
    steps = {line.split("|")[1].strip().strip("`"): int(line.split("|")[2].replace(",", ""))
             for line in block.splitlines() if line.startswith("| `")}
    assert steps == {s.name: s.train.steps for s in plan_stages(cfg)}


# ---- OpenWebText as documents -----------------------------------------------------------------------------------

def write_owt(root: Path, n: int) -> list[str]:
    docs = [f"Document {i} opens here.\nIts second paragraph, {i}, ends it." for i in range(n)]
    folder = root / "openwebtext"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "openwebtext.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    return docs


def test_split_documents_holds_out_whole_documents() -> None:
    docs = [f"d{i}" for i in range(45)]
    s = corpora.split_documents(docs)
    assert s["train"] + s["valid"] + s["test"] == docs  # every document once, in order
    assert (len(s["valid"]), len(s["test"])) == (2, 2)  # 45 // 10 = 4 held out: half valid, half test
    big = corpora.split_documents([""] * 3_000_000)
    assert len(big["valid"]) + len(big["test"]) == corpora.HELDOUT_DOCUMENTS
    with pytest.raises(ForethoughtError, match="at least 3 documents"):
        corpora.split_documents(["a", "b"])


def test_openwebtext_is_read_as_documents_with_eos(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   isolated_env: None, t5_like: str) -> None:
    docs = write_owt(tmp_path / "data", 30)
    monkeypatch.setenv("FORETHOUGHT_DATA", str(tmp_path / "data"))
    from forethought.data.tokenizers import load_tokenizer

    t = load_tokenizer(t5_like)
    ids = {s: corpora.token_array("openwebtext", s, t5_like, tmp_path / "cache") for s in corpora.SPLITS}
    assert [int((ids[s] == t.eos_token_id).sum()) for s in corpora.SPLITS] == [27, 1, 2]  # one eos per document
    first_valid = t(docs[27], add_special_tokens=False)["input_ids"] + [t.eos_token_id]
    assert ids["valid"].tolist() == first_valid  # the document whole, newline and all, then eos
    assert corpora.load_corpus_text("openwebtext", "test").count(corpora.DOC_SEP) == 2
    (tmp_path / "data" / "openwebtext" / "openwebtext.jsonl").write_text('{"text": "a"}\nnot json\n')
    with pytest.raises(ForethoughtError, match="line 2 is not JSON"):
        corpora.load_corpus_text("openwebtext", "train")


def test_openwebtext_missing_says_which_file_to_place_where(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    (tmp_path / "data").mkdir()
    line = expect_clean_failure(["psf", "recipe", "--config", "paper", "--run.out_dir", str(runs)], tmp_path, runs,
                                ["openwebtext/openwebtext.jsonl", "Skylion007/openwebtext", "FORETHOUGHT_DATA"],
                                env={"FORETHOUGHT_DATA": str(tmp_path / "data")})
    assert str(tmp_path / "data" / "openwebtext") in line


# ---- a tiny run: T5-like tokenizer, OpenWebText documents, EMA weights --------------------------------------------

@pytest.fixture(scope="module")
def t5_like(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A stand-in of T5's tokenizer, of the same kind: a SentencePiece unigram model (Metaspace pre-tokenizer,
    NFKC, newlines to spaces), with T5's special tokens <pad> = 0, </s> = 1 (eos), <unk> = 2; saved as a folder that
    ``--data.tokenizer`` takes in place of google-t5/t5-small."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace("\n", " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    words = [f"Document {i} opens here. Its second paragraph, {i}, ends it." for i in range(40)]
    tok.train_from_iterator(words + [corpora.generated_corpus(20_000)], trainers.UnigramTrainer(
        vocab_size=300, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>", show_progress=False))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", pad_token="<pad>", unk_token="<unk>")
    folder = tmp_path_factory.mktemp("t5-like")
    fast.save_pretrained(folder)
    return str(folder)


@pytest.mark.parametrize("codes", [False, True])
def test_tiny_paper_shaped_run_samples_with_its_ema_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            isolated_env: None, t5_like: str, codes: bool) -> None:
    """The tiny recipe on a local OpenWebText file with the T5-like tokenizer and EMA on every stage: the run keeps
    the tokenizer, every checkpoint holds its EMA, and load_recipe (what sampling and evaluation use) rebuilds
    the PSF model, the prior and the AR baseline with their EMA weights, not the raw ones; also with the paper
    preset's code channel (BN-VAE, the code input at normal(0, 0.02), code dropout), whose codes stage is then the
    final model."""
    from safetensors.torch import load_file

    from forethought.core.checkpoint import latest_checkpoint, read_ema
    from forethought.psf import load_recipe
    from forethought.psf.recipe import run

    write_owt(tmp_path / "data", 60)
    monkeypatch.setenv("FORETHOUGHT_DATA", str(tmp_path / "data"))
    overrides = {"run.out_dir": str(tmp_path / "runs"), "run.name": "owt", "data.corpus": "openwebtext",
                 "data.tokenizer": t5_like, "data.eval_sequences": 2, "codes.enabled": str(codes).lower(),
                 "longer_blocks.blocks": "[]"}
    stages = ("base", "landing", "self_realized", "prior", "ar", *(("codes",) if codes else ()))
    if codes:
        paper = yaml.safe_load((CONFIG_DIR / "psf" / "recipe_paper.yaml").read_text())["model"]
        overrides.update({f"model.{k}": str(paper[k]) for k in ("code_mean_norm", "code_in_init", "code_dropout")})
    overrides.update({f"{s}.train.ema_decay": "0.5" for s in stages})
    overrides.update({f"{s}.train.steps": "2" for s in stages})
    cfg = load_config(RecipeConfig, CONFIG_DIR / "psf" / "recipe_tiny.yaml",
                      [f"--{k}={v}" for k, v in overrides.items()])
    results = run(cfg)
    assert results["bos_id"] == 1 and results["vocab_size"] <= 300  # T5's </s>, the stand-in's vocabulary
    art = load_recipe(tmp_path / "runs" / "owt")
    assert art.stage == ("codes" if codes else "self_realized")
    assert (art.cfg.model.code_mean_norm == "batch") is codes
    for folder, model in ((art.stage, art.model), ("prior", art.prior), ("ar", art.ar)):
        ckpt = latest_checkpoint(tmp_path / "runs" / "owt" / folder)
        ema = read_ema(ckpt)
        assert ema, folder
        state = model.state_dict()
        for name, value in ema.items():
            assert torch.equal(state[name].cpu(), value.to(state[name].dtype)), (folder, name)
        raw = load_file(str(ckpt / "model.safetensors"))
        assert any(not torch.equal(raw[k], ema[k]) for k in ema if k in raw), folder  # EMA differs from raw
    assert type(art.tokenizer).__name__ != "PlantedTokenizer" and art.tokenizer.eos_token == "</s>"


@pytest.mark.parametrize("stage_name", ["base", "self_realized", "prior", "ar"])
def test_stage_flops_match_the_flop_counter(stage_name: str) -> None:
    """The GPU-hours estimate's analytic FLOPs per step (forethought.psf.paper_cost.stage_flops) against torch's
    FlopCounterMode over the same training step (forward, rollout, backward) of a tiny model: within 15 %."""
    from dataclasses import replace

    from torch.utils.flop_counter import FlopCounterMode

    from forethought.eval.cost import matmul_params
    from forethought.psf.ar import ar_loss, build_ar
    from forethought.psf.build import prior_for
    from forethought.psf.config import StageFeatures
    from forethought.psf.model import PSFModel, realized_summaries
    from forethought.psf.paper_cost import stage_flops
    from forethought.psf.recipe import plan_stages, stage_features, trajectories, trajectory_dim

    cfg = load_config(RecipeConfig, CONFIG_DIR / "psf" / "recipe_tiny.yaml",
                      ["--model.seq_len=64", "--model.blocks=8", "--model.n_embd=64", "--model.n_head=2",
                       "--prior.model.n_embd=64", "--ar.model.n_embd=64"])
    stage = next(s for s in plan_stages(cfg) if s.name == stage_name)
    torch.manual_seed(0)
    V, B = 512, 2
    model = PSFModel(replace(cfg.model, vocab_size=V))
    f = stage_features("codes" if stage.kind == "prior" else stage_name)
    model.configure(StageFeatures(landing=f["landing"], codes=f["codes"]))
    tokens = torch.randint(0, V, (B, cfg.model.seq_len))
    prior = prior_for(model, cfg.prior.model, trajectory_dim(model, cfg.prior.model), model.blocks)
    with FlopCounterMode(display=False) as counter:
        if stage.kind == "ar":
            ar_loss(build_ar(cfg.ar.model, V, cfg.model.seq_len), tokens, 1).backward()
        elif stage.kind == "prior":
            prior.loss(trajectories(model, tokens, True)).backward()
        else:
            realized = realized_summaries(model, tokens, 1.0, 1.0) if f["self_realized"] else None
            model(tokens, realized=realized)["loss"].backward()
    analytic = stage_flops(cfg, stage, B, model, matmul_params(prior))
    assert abs(counter.get_total_flops() / analytic - 1) < 0.15, (counter.get_total_flops(), analytic)


def test_mauve_at_512_takes_its_features_at_its_own_cap() -> None:
    """psf eval's mauve_tokens (the paper's MAUVE@512): MAUVE's features are the judge's state at each text's own
    cut (its last token within mauve_cap), while gen-PPL, entropy and the rest stay at the common cap."""
    import numpy as np

    from forethought.eval.judge import JudgePass
    from forethought.psf.scores import judge_scores

    rng = np.random.default_rng(0)
    lengths = (9, 5)
    jp = JudgePass(ids=[list(range(n)) for n in lengths], nll=[rng.random(n) for n in lengths],
                   hidden=[rng.random((n + 1, 4)).astype(np.float32) for n in lengths], start=True)
    plain, at3 = judge_scores(jp, 8), judge_scores(jp, 8, 3)
    assert np.array_equal(plain.nll, at3.nll) and np.array_equal(plain.entropy, at3.entropy)
    assert np.array_equal(plain.features[0], jp.hidden[0][8]) and np.array_equal(plain.features[1], jp.hidden[1][5])
    assert np.array_equal(at3.features, np.stack([jp.hidden[0][3], jp.hidden[1][3]]))  # start token + 3 tokens
    with pytest.raises(ForethoughtError, match="mauve_tokens must be >= 0"):
        EvalConfig(recipe_run="r", mauve_tokens=-1).validate()
