"""RoCoFT (row/column fine-tuning) on an HF model: only the chosen rows or columns receive gradient, the merged
weights are the base plus the delta, and a trained adapter saves, reloads and scores the same through the CLI."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from forethought.cli import main
from forethought.core.errors import ForethoughtError
from forethought.models.rocoft import apply_rocoft, merge_rocoft, rocoft_layers
from forethought.testing import tiny_llama, tiny_llama_folder


def _batch() -> torch.Tensor:
    return torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("side", ["row", "column"])
def test_only_the_chosen_rows_or_columns_receive_gradient(side: str) -> None:
    base = tiny_llama(vocab_size=64, hidden_size=32, layers=1, heads=4, kv_heads=2)
    plain = copy.deepcopy(base)  # the same weights, every one trainable: the full gradient to compare with
    model = apply_rocoft(base, side, 3)
    ids = _batch()
    model(ids, labels=ids).loss.backward()
    plain(ids, labels=ids).loss.backward()
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    layers = rocoft_layers(model)
    assert trained == {f"{n}.delta" for n in layers} and "lm_head" not in " ".join(layers)
    assert len(layers) == 7  # q, k, v, o, gate, up, down of the one block
    for name, layer in layers.items():
        assert layer.base.weight.grad is None
        full = plain.get_submodule(name).weight.grad  # (out, in)
        chosen = full[:3] if side == "row" else full[:, :3]
        torch.testing.assert_close(layer.delta.grad, chosen, rtol=1e-4, atol=1e-6)
    # one optimizer step moves only those rows / columns of the merged weight
    before = {n: m.merged_weight() for n, m in layers.items()}
    torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1).step()
    for name, layer in layers.items():
        moved = (layer.merged_weight() != before[name])
        outside = moved[3:] if side == "row" else moved[:, 3:]
        assert moved.any() and not outside.any(), name


def test_merged_weights_are_base_plus_delta() -> None:
    model = apply_rocoft(tiny_llama(vocab_size=64, hidden_size=32, layers=1, heads=4, kv_heads=2), "column", 2)
    ids = _batch()
    with torch.no_grad():
        assert torch.equal(model(ids).logits, model(ids).logits)
        for layer in rocoft_layers(model).values():
            layer.delta.normal_()
            expected = layer.base.weight.clone()
            expected[:, :2] += layer.delta
            assert torch.equal(layer.merged_weight(), expected)
        wrapped = model(ids).logits
        merged = merge_rocoft(model)
        assert not rocoft_layers(merged) and all(type(m) is nn.Linear for n, m in merged.named_modules()
                                                 if n.endswith(("q_proj", "down_proj")))
        torch.testing.assert_close(merged(ids).logits, wrapped, rtol=1e-4, atol=1e-5)


def test_a_new_rocoft_model_is_the_base_model_and_bad_targets_fail() -> None:
    base = tiny_llama(vocab_size=64, hidden_size=32, layers=1, heads=4, kv_heads=2)
    ids = _batch()
    with torch.no_grad():
        before = base(ids).logits.clone()
        after = apply_rocoft(base, "row", 4, "q_proj,v_proj")(ids).logits
    torch.testing.assert_close(after, before)
    assert sorted(n.split(".")[-1] for n in rocoft_layers(base)) == ["q_proj", "v_proj"]
    with pytest.raises(ForethoughtError, match="no linear layer matches"):
        apply_rocoft(tiny_llama(vocab_size=64, hidden_size=32, layers=1), "row", 1, "nothing")


@pytest.mark.usefixtures("isolated_env")
def test_rocoft_trains_saves_and_reloads_through_the_cli(tmp_path: Path) -> None:
    rows = [{"text": f"item {i} is {'good' if i % 2 else 'bad'}", "label": "good" if i % 2 else "bad"}
            for i in range(24)]
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = tmp_path / "tiny"
    tiny_llama_folder(base, " ".join(r["text"] for r in rows) * 4 + " Answer text", 200, hidden_size=32, layers=1,
                      heads=4, kv_heads=2)
    assert main(["predgen", "train", "--config", "tiny", "--base", str(base), "--task.name", str(data),
                 "--task.target_field", "label", "--adapter.method", "rocoft", "--adapter.r", "2",
                 "--adapter.rocoft_side", "row", "--train.steps", "2", "--eval.latency_examples", "0",
                 "--run.out_dir", str(tmp_path), "--run.name", "r"]) == 0
    res = json.loads((tmp_path / "r" / "results.json").read_text())
    assert (tmp_path / "r" / "model" / "adapter" / "rocoft.safetensors").is_file()
    assert main(["predgen", "eval", "--model", str(tmp_path / "r"), "--out", str(tmp_path / "e.json")]) == 0
    again = json.loads((tmp_path / "e.json").read_text())
    assert again["accuracy"] == res["accuracy"]
    preds = (tmp_path / "r" / "predictions.jsonl").read_text()
    assert preds and res["trainable_params"] > 0
