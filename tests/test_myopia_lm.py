"""`myopia lm` on the tiny preset: a reloaded variant computes what the trained one computed, and
``--train.eval_every`` logs a validation curve for every variant."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from forethought.cli import CONFIG_DIR
from forethought.core.config import load_config
from forethought.data.corpora import eval_windows
from forethought.myopia import lm
from forethought.myopia.wrap import make_myopic

VARIANTS = ["vanilla", "detach_hidden", "local", "zero_past"]
STEPS, EVAL_EVERY = 5, 2


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, torch.nn.Module], torch.Tensor]:
    """One tiny run of every variant; keeps each trained model as it was when the run evaluated it."""
    root = tmp_path_factory.mktemp("myopia-lm")
    cfg = load_config(lm.LMConfig, CONFIG_DIR / "myopia" / "lm_tiny.yaml",
                      ["--run.out_dir", str(root), "--variants", f"[{', '.join(VARIANTS)}]",
                       "--train.steps", str(STEPS), "--train.eval_every", str(EVAL_EVERY),
                       "--data.cache_dir", str(root / "cache")])
    seen: list[torch.nn.Module] = []
    evaluate = lm.per_position_loss

    def keep(model: torch.nn.Module, windows: torch.Tensor, batch: int = 32) -> list[float]:
        # run() trains the variants one after another, each model evaluated in place (last: after training)
        if not seen or seen[-1] is not model:
            seen.append(model)
        return evaluate(model, windows, batch)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lm, "per_position_loss", keep)
        lm.run(cfg)
    assert len(seen) == len(VARIANTS)
    _, valid = lm.load_tokens(cfg)
    return root / cfg.run.name, dict(zip(VARIANTS, seen, strict=True)), eval_windows(valid, 4, cfg.data.seq_len)


@pytest.mark.parametrize("variant", VARIANTS)
def test_loaded_variant_computes_what_training_computed(trained, variant: str) -> None:
    run_dir, models, ids = trained
    loaded, _ = lm.load_variant(run_dir, variant)
    with torch.no_grad():
        want = lm.logits_of(models[variant].eval(), ids)
        got = lm.logits_of(loaded, ids)
        torch.testing.assert_close(got, want)
        if variant in ("zero_past", "local"):  # these change the forward: plain attention must differ
            plain = lm.logits_of(make_myopic(loaded, mode="vanilla"), ids)
            assert (plain - want).abs().max() > 1e-3


def test_eval_every_logs_validation_loss_for_every_variant(trained) -> None:
    run_dir = trained[0]
    expected = [s for s in range(1, STEPS + 1) if s % EVAL_EVERY == 0 or s == STEPS]
    results = json.loads((run_dir / "results.json").read_text())
    for variant in VARIANTS:
        rows = [json.loads(line) for line in (run_dir / variant / "metrics.jsonl").read_text().splitlines()]
        evals = [r for r in rows if r.get("eval")]
        assert [r["step"] for r in evals] == expected, variant
        assert all(0 < r["val_loss"] < 20 for r in evals)
        assert [r["step"] for r in results["variants"][variant]["eval_curve"]] == expected
        assert (run_dir / variant / "eval_curve.png").stat().st_size > 1000


def test_summary_uses_the_papers_definitions(trained) -> None:
    """Bonus = vanilla − local (the paper's), myopic − local kept under its own name, and the gap over the context
    benefit (myopic − vanilla) / (bigram − vanilla)."""
    res = json.loads((trained[0] / "results.json").read_text())
    loss = {k: v["val_loss"] for k, v in res["variants"].items()}
    assert res["local_myopic_bonus"] == pytest.approx(loss["vanilla"] - loss["local"], abs=1e-12)
    assert res["myopic_minus_local"] == pytest.approx(loss["detach_hidden"] - loss["local"], abs=1e-12)
    want = (loss["detach_hidden"] - loss["vanilla"]) / (loss["zero_past"] - loss["vanilla"])
    if loss["zero_past"] > loss["vanilla"]:
        assert res["gap_over_context"] == pytest.approx(want, abs=1e-12)
    assert lm.gap_over_context(3.40, 3.28, 5.33) == pytest.approx(0.12 / 2.05)
    assert lm.gap_over_context(3.0, 3.0, 2.9) is None  # context buys nothing: no ratio


def test_repeating_the_corpus_warns_before_training(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load_config(lm.LMConfig, CONFIG_DIR / "myopia" / "lm_tiny.yaml",
                      ["--run.out_dir", str(tmp_path), "--data.cache_dir", str(tmp_path / "cache"),
                       "--variants", "[vanilla]"])
    n = len(lm.load_tokens(cfg)[0])
    per_step = cfg.train.batch_size * cfg.data.seq_len
    assert lm.repeat_warning(cfg, n_tokens := per_step * cfg.train.steps) is None  # one epoch: quiet
    assert "is 4.0 epochs" in lm.repeat_warning(cfg, n_tokens // 4)

    class Stop(Exception):
        pass

    def no_training(*a, **k):
        raise Stop

    monkeypatch.setattr(lm, "train", no_training)
    cfg.train.steps = int(4 * n / per_step) + 1
    with pytest.raises(Stop):
        lm.run(cfg)
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "epochs of corpus 'generated'" in err
    cfg.train.steps = max(1, n // per_step)
    with pytest.raises(Stop):
        lm.run(cfg)
    assert "warning" not in capsys.readouterr().err
