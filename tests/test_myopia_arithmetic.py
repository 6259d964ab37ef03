"""``forethought myopia arithmetic``: the reference's multiplication data as pure functions (checked against the text
the reference's notebook printed), the product-only loss, the exact-product accuracy against a model that knows the
answer, a tiny run through the real CLI, bad input refused in one line, and the paper preset against the reference
run's settings (the table in docs/myopia.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from cli_harness import expect_clean_failure

from forethought.cli import main
from forethought.core.config import load_config
from forethought.myopia.arithmetic import (
    EQUALS,
    TIMES,
    VOCAB,
    accuracy_table,
    batch_of,
    decode,
    encode,
    eval_sets,
    product_loss,
    prompt_len,
    sample_batch,
    sample_operands,
    score,
    seq_len,
)
from forethought.myopia.config import ArithmeticConfig, ArithmeticTaskConfig

CONFIGS = Path(__file__).resolve().parents[1] / "src" / "forethought" / "configs" / "myopia"


def test_encode_is_the_reference_text() -> None:
    """The example the reference's arithmetic_acc notebook printed (5-digit operands padded to 10): 71501 * 29124
    = 2082395124, every number reversed, each symbol after a space."""
    ids = encode(71501, 29124, pad=10, product_digits=10)
    assert decode(ids) == " 1 0 5 1 7 0 0 0 0 0 * 4 2 1 9 2 0 0 0 0 0 = 4 2 1 5 9 3 2 8 0 2"
    task = ArithmeticTaskConfig(max_digits=5, pad=10)
    assert len(ids) == seq_len(task) == 32 and ids[prompt_len(task) - 1] == EQUALS and ids[10] == TIMES


def test_batch_of_is_encode_row_by_row() -> None:
    task = ArithmeticTaskConfig(min_digits=1, max_digits=3, pad=5)
    x, y = torch.tensor([0, 7, 999, 120]), torch.tensor([5, 99, 999, 3])
    rows = batch_of(x, y, task)
    assert rows.tolist() == [encode(int(a), int(b), 5, 6) for a, b in zip(x, y, strict=True)]
    assert int(rows.max()) < VOCAB


def test_operands_follow_the_reference_draw() -> None:
    """Digit counts uniform in min..max, then a number below 10^count: with min = max = 2 every operand is below
    100 and some are below 10 (leading zeros); over 1..3 all three counts' ranges show up; seeded."""
    g = torch.Generator().manual_seed(0)
    two = sample_operands(4000, 2, 2, g)
    assert int(two.max()) < 100 and 0 < int((two < 10).sum()) < 1000  # about 10 % of 2-digit draws
    mixed = sample_operands(6000, 1, 3, torch.Generator().manual_seed(1))
    share_small = float((mixed < 10).double().mean())  # 1/3 (count 1) + 1/3·0.1 + 1/3·0.01 ≈ 0.37
    assert 0.33 < share_small < 0.41 and int(mixed.max()) >= 100
    again = sample_operands(6000, 1, 3, torch.Generator().manual_seed(1))
    assert torch.equal(mixed, again)


class Oracle(torch.nn.Module):
    """Logits that put all mass on the true next token of the sequences it was built with (wrong at ``wrong``)."""

    def __init__(self, batch: torch.Tensor, wrong: tuple[int, int] | None = None) -> None:
        super().__init__()
        self.batch = batch
        self.wrong = wrong
        self.bias = torch.nn.Parameter(torch.zeros(()))  # a parameter, so score() finds a device

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        nxt = self.batch[:, 1:ids.shape[1] + 1].clone()
        if self.wrong is not None:
            row, pos = self.wrong
            nxt[row, pos] = (nxt[row, pos] + 1) % 10
        return torch.nn.functional.one_hot(nxt, VOCAB).float() * 50 + self.bias


def test_score_counts_whole_products() -> None:
    task = ArithmeticTaskConfig(min_digits=1, max_digits=2, pad=4)
    batch = sample_batch(8, task, torch.Generator().manual_seed(3))
    start = prompt_len(task)
    assert score(Oracle(batch), batch, start)["accuracy"] == 1.0
    wrong = score(Oracle(batch, wrong=(2, start + 1)), batch, start)  # one product token of row 2 wrong
    assert wrong["accuracy"] == 7 / 8
    assert wrong["token_accuracy"] == pytest.approx(1 - 1 / (8 * 4))
    # a wrong prediction inside the prompt is not scored (the reference's accuracy starts at the product)
    assert score(Oracle(batch, wrong=(2, 1)), batch, start)["accuracy"] == 1.0


def test_loss_reads_only_the_product() -> None:
    """Logits at prompt positions do not enter the loss; at a product position they do."""
    task = ArithmeticTaskConfig(min_digits=1, max_digits=2, pad=4)
    batch = sample_batch(4, task, torch.Generator().manual_seed(4))
    start = prompt_len(task)
    base = product_loss(Oracle(batch), batch, start)[0]
    assert product_loss(Oracle(batch, wrong=(0, start - 3)), batch, start)[0] == base
    assert product_loss(Oracle(batch, wrong=(0, start - 1)), batch, start)[0] > base + 1  # predicts product digit 0


def test_eval_sets_cover_every_cell() -> None:
    task = ArithmeticTaskConfig(min_digits=1, max_digits=2, pad=3)
    sets = eval_sets(task, 16, seed=0)
    assert sorted(sets) == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert int(sets[(1, 2)][:, :3].max()) < 10 and int(sets[(1, 2)][:, 1:3].sum()) == 0  # x: one digit, zeros
    table = accuracy_table(Oracle(sets[(1, 1)]), {(1, 1): sets[(1, 1)]}, prompt_len(task))
    assert table["by_digits"] == {"1": 1.0} and table["accuracy"] == 1.0


def test_tiny_run_through_the_cli(tmp_path: Path) -> None:
    """Both models train from the same weights on the same data; the table has every cell; a myopic model whose
    data and weights match vanilla's still ends elsewhere (its gradient differs)."""
    assert main(["myopia", "arithmetic", "--config", "tiny", "--run.out_dir", str(tmp_path), "--run.name", "t"]) == 0
    r = json.loads((tmp_path / "t" / "results.json").read_text())
    van, myo = r["variants"]["vanilla"], r["variants"]["detach_hidden"]
    assert set(van["cells"]) == {"1x1", "1x2", "2x1", "2x2"} and set(van["by_digits"]) == {"1", "2"}
    assert van["curve"][0][1] == pytest.approx(myo["curve"][0][1])  # same weights, same first batch: same loss
    assert van["curve"][-1][1] != myo["curve"][-1][1]
    assert r["task"]["seq_len"] == 14 and r["examples_seen"] == r["steps"] * r["batch_size"]


@pytest.mark.parametrize("args,names", [
    (["--task.pad", "1"], ["pad (1) must be >= max_digits"]),
    (["--task.max_digits", "12", "--task.pad", "12"], ["max_digits must be at most 9"]),
    (["--model.n_positions", "8"], ["model.n_positions"]),
    (["--variants", "[local]"], ["variants"]),
    (["--eval_examples", "0"], ["eval_examples must be at least 1"]),
])
def test_arithmetic_bad_input(tmp_path: Path, args: list[str], names: list[str]) -> None:
    expect_clean_failure(["myopia", "arithmetic", "--config", "tiny", "--run.out_dir", str(tmp_path / "runs"),
                          *args], tmp_path, tmp_path, names, in_process=True)


# The reference's run (lit_arithmetic notebook, LitGPTModel's defaults, Lightning's Trainer): docs/myopia.md's table.
REFERENCE_ARITHMETIC = {
    "task.min_digits": 1, "task.max_digits": 5, "task.pad": 10,
    "model.n_layer": 12, "model.n_embd": 768, "model.n_head": 12, "model.dropout": 0.1, "model.attn_dropout": 0.1,
    "model.activation": "gelu_new", "model.init": "gpt2", "model.final_norm": True,
    "train.steps": 9766, "train.batch_size": 1024, "train.lr": 6e-4, "train.warmup_steps": 97,
    "train.min_lr_ratio": 0.0, "train.schedule": "cosine", "train.weight_decay": 0.01, "train.beta2": 0.999,
    "train.grad_clip": 0.0, "run.precision": "bf16", "eval_examples": 1024,
}


def _get(cfg: object, dotted: str) -> object:
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


def test_paper_preset_is_the_reference_run() -> None:
    cfg = load_config(ArithmeticConfig, CONFIGS / "arithmetic_paper.yaml")
    for key, value in REFERENCE_ARITHMETIC.items():
        assert _get(cfg, key) == value, key
    # 10M examples in one pass (10,000,000 / 1,024 = 9,765.6: Lightning's last, partial batch is one more step)
    assert cfg.train.steps == -(-10_000_000 // cfg.train.batch_size)
    assert cfg.train.warmup_steps == int(0.01 * cfg.train.steps)  # get_cosine_schedule_with_warmup, 1 %
    assert set(cfg.variants) == {"vanilla", "detach_hidden"}
