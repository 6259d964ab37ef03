"""The Pythia scaling presets (``myopia lm --config pythia-<size>``) against the reference run's settings
(``src/scripts/run_pythia.py``; docs/myopia.md's Pythia table), and the Pythia-shaped surrogates of ``myopia
init-model``."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from forethought.core.config import load_config
from forethought.myopia.config import InitModelConfig, LMConfig

CONFIGS = Path(__file__).resolve().parents[1] / "src" / "forethought" / "configs" / "myopia"

# run_pythia.py's LR_DICT (Pythia's own pretraining learning rates, from EleutherAI/pythia)
PYTHIA_LR = {"14m": 1.0e-3, "31m": 1.0e-3, "70m": 3.0e-4, "160m": 3.0e-4, "410m": 3.0e-4, "1b": 3.0e-4,
             "1.4b": 2.0e-4, "2.8b": 1.6e-4}
SEQUENCES, ROW_TOKENS, BATCH = 10_000_000, 64, 512  # 10M Pile rows of 64 tokens; the paper's batch


@pytest.mark.parametrize("size", list(PYTHIA_LR))
def test_pythia_preset_is_the_reference_run(size: str) -> None:
    cfg = load_config(LMConfig, CONFIGS / f"lm_pythia-{size}.yaml")
    assert cfg.base == f"EleutherAI/pythia-{size}" and cfg.lora_r == 0  # the pretrained model, fully fine-tuned
    assert cfg.variants == ["vanilla", "detach_hidden"]
    assert cfg.data.corpus.startswith("ids:") and cfg.data.tokenizer == "auto"  # pre-tokenised, Pythia's tokenizer
    assert cfg.data.seq_len + 1 == ROW_TOKENS  # every window one whole 64-token row
    t = cfg.train
    assert t.lr == pytest.approx(0.4 * PYTHIA_LR[size], rel=1e-12)
    assert t.batch_size == BATCH and t.steps == math.ceil(SEQUENCES / BATCH)  # one pass, the last batch partial
    assert t.warmup_steps == int(0.05 * t.steps)  # get_cosine_schedule_with_warmup(0.05 × steps)
    assert (t.schedule, t.min_lr_ratio, t.weight_decay, t.beta2, t.grad_clip) == ("cosine", 0.0, 0.01, 0.999, 0.0)
    assert cfg.run.precision == "fp16" and cfg.base_dtype == "auto"  # fp16 autocast over fp32 weights
    assert t.batch_size % t.grad_accum == 0


def test_every_size_has_a_preset() -> None:
    assert {p.stem.removeprefix("lm_pythia-") for p in CONFIGS.glob("lm_pythia-*.yaml")} == set(PYTHIA_LR)


def test_surrogate_shapes_follow_pythia_design() -> None:
    from forethought.myopia.init_model import SHAPES

    assert SHAPES["pythia-14m"]["hidden_size"] == 128 and SHAPES["pythia-14m"]["num_attention_heads"] == 4
    assert SHAPES["pythia-31m"]["intermediate_size"] == 1024 and SHAPES["pythia-31m"]["num_attention_heads"] == 8
    for name in ("pythia-w32", "pythia-w64"):
        load_config(InitModelConfig, overrides=[f"shape={name}"])
        s = SHAPES[name]
        assert s["hidden_size"] // s["num_attention_heads"] == 32 and s["num_hidden_layers"] == 6


def test_pythia_preset_runs_on_local_token_rows(tmp_path: Path) -> None:
    """The preset's data path end to end on a small local file: 64-token rows of GPT-2 ids, a width-32 Pythia-shaped
    model standing in for the pretrained one, a few steps in fp32 on the CPU; both arms train and the gap is
    reported."""
    import json

    import numpy as np

    from forethought.cli import main

    assert main(["myopia", "init-model", "--shape", "pythia-w32", "--data.tokenizer", "gpt2", "--data.corpus",
                 "generated", "--data.cache_dir", str(tmp_path / "c"), "--run.out_dir", str(tmp_path),
                 "--run.name", "neox"]) == 0
    rows = np.random.default_rng(0).integers(0, 50257, size=(200, 64), dtype=np.int64)
    np.save(tmp_path / "pile64.npy", rows)
    assert main(["myopia", "lm", "--config", "pythia-14m", "--base", str(tmp_path / "neox"), "--data.corpus",
                 f"ids:{tmp_path / 'pile64.npy'}", "--data.cache_dir", str(tmp_path / "c"), "--run.precision", "fp32",
                 "--run.device", "cpu", "--train.steps", "2", "--train.batch_size", "4", "--train.warmup_steps", "1",
                 "--train.eval_every", "0", "--train.checkpoint_every", "0", "--data.eval_sequences", "2",
                 "--data.curve_sequences", "1", "--run.out_dir", str(tmp_path), "--run.name", "ft"]) == 0
    r = json.loads((tmp_path / "ft" / "results.json").read_text())
    assert set(r["variants"]) == {"vanilla", "detach_hidden"} and "gap" in r
    assert r["train_tokens"] == 198 * 64 and r["eval_sequences"] == 2 and r["seq_len"] == 63
