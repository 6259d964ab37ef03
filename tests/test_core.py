"""Configs, checkpoints, the training loop: pure in-process tests."""

from dataclasses import dataclass

import pytest
import torch

from forethought.core.checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint
from forethought.core.config import field, load_config, parse_overrides
from forethought.core.errors import ForethoughtError
from forethought.core.trainer import TrainConfig, lr_at, shard
from forethought.models.gpt import GPT, GPTConfig


@dataclass
class Inner:
    steps: int = field(3, "steps")
    lr: float = field(1e-3, "lr")


@dataclass
class Outer:
    name: str = field("x", "name")
    inner: Inner = field(Inner(), "inner")
    ps: list[float] = field([1.0], "ps")


def test_config_yaml_and_overrides(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("name: y\ninner: {steps: 7}\n")
    cfg = load_config(Outer, f, ["--inner.lr", "3e-4", "ps=[0.5, 0.1]"])
    assert (cfg.name, cfg.inner.steps, cfg.inner.lr, cfg.ps) == ("y", 7, 3e-4, [0.5, 0.1])
    assert Outer().ps is not Outer().ps  # no shared mutable defaults


@pytest.mark.parametrize("args,msg", [
    (["--inner.stepz", "3"], "unknown config key 'inner.stepz' \\(did you mean 'inner.steps'\\?\\)"),
    (["--inner.steps", "abc"], "expects an integer"),
    (["--bogus", "1"], "unknown config key 'bogus'"),
    (["--inner", "3"], "is a section"),
    (["--inner.steps"], "needs a value"),
])
def test_config_errors(args, msg):
    with pytest.raises(ForethoughtError, match=msg):
        load_config(Outer, None, args)


def test_config_bad_files(tmp_path):
    with pytest.raises(ForethoughtError, match="not found"):
        load_config(Outer, tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("inner: [1, 2\n")
    with pytest.raises(ForethoughtError, match="not valid YAML"):
        load_config(Outer, bad)
    bad.write_text("inner: {stepz: 2}\n")
    with pytest.raises(ForethoughtError, match="inner.stepz"):
        load_config(Outer, bad)


def test_parse_overrides_forms():
    # kept as typed; the key's type decides how each is read (see test_string_overrides_keep_their_text)
    assert parse_overrides(["--a.b=2", "c=x", "--d", "[1, 2]"]) == [("a.b", "2"), ("c", "x"), ("d", "[1, 2]")]


@dataclass
class _Texts:
    template: str = field("", "")
    labels: list[str] = field([], "")
    sizes: list[int] = field([], "")
    maybe: str | None = field(None, "")
    flag: bool = field(False, "")
    lr: float = field(0.1, "")


def test_string_overrides_keep_their_text():
    cfg = load_config(_Texts, None, ["--template", r"Title: {title}\nBody: {body}\nScore:", "--labels", "[no, yes]",
                                     "--sizes", "[1, 2]", "--maybe", "Review: {text}", "--flag", "true",
                                     "--lr", "1e-3"])
    assert cfg.template == "Title: {title}\nBody: {body}\nScore:"  # real newlines, not backslash-n
    assert cfg.labels == ["no", "yes"] and cfg.sizes == [1, 2] and cfg.maybe == "Review: {text}"
    assert cfg.flag is True and cfg.lr == pytest.approx(1e-3)
    assert load_config(_Texts, None, ["--template", r"a\\nb"]).template == "a\\nb"  # an escaped backslash
    assert load_config(_Texts, None, ["--labels", "on"]).labels == ["on"]


def test_lr_schedule():
    cfg = TrainConfig(steps=100, lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(0, cfg) == pytest.approx(0.1)
    assert lr_at(9, cfg) == pytest.approx(1.0)
    assert lr_at(10, cfg) == pytest.approx(1.0)
    assert lr_at(99, cfg) == pytest.approx(0.1, abs=1e-3)


def test_shard_splits_global_batch():
    b = {"x": torch.arange(8).view(4, 2), "y": torch.arange(4)}
    parts = [shard(b, r, 2) for r in range(2)]
    assert torch.equal(torch.cat([p["y"] for p in parts]), b["y"])
    with pytest.raises(ForethoughtError, match="divisible"):
        shard(torch.zeros(3), 0, 2)


def _model():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=17, n_positions=8, n_embd=8, n_layer=1, n_head=2))


def test_checkpoint_roundtrip_and_rotation(tmp_path):
    m = _model()
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, m, {"step": step}, keep=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-000002", "step-000003"]
    m2 = GPT(GPTConfig(vocab_size=17, n_positions=8, n_embd=8, n_layer=1, n_head=2))
    state = load_checkpoint(latest_checkpoint(tmp_path), m2)
    assert state["step"] == 3
    for (k, a), b in zip(m.state_dict().items(), m2.state_dict().values()):
        assert torch.equal(a, b), k
    assert m2.head.weight is m2.wte.weight  # the tie survives de-duplicated saving


def test_truncated_and_corrupt_checkpoints_are_detected(tmp_path):
    m = _model()
    ck = save_checkpoint(tmp_path, 5, m, {"step": 5})
    f = ck / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    with pytest.raises(ForethoughtError, match="truncated or corrupt: model.safetensors"):
        load_checkpoint(ck, _model())
    f.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(ForethoughtError, match="SHA-256"):
        load_checkpoint(ck, _model())
    (ck / "manifest.json").write_text("{not json")
    with pytest.raises(ForethoughtError, match="manifest"):
        load_checkpoint(ck, _model())


def test_checkpoint_shape_mismatch_is_clear(tmp_path):
    ck = save_checkpoint(tmp_path, 1, _model(), {"step": 1})
    other = GPT(GPTConfig(vocab_size=19, n_positions=8, n_embd=8, n_layer=1, n_head=2))
    with pytest.raises(ForethoughtError, match="does not match the model"):
        load_checkpoint(ck, other)


def test_half_written_checkpoint_is_ignored(tmp_path):
    save_checkpoint(tmp_path, 1, _model(), {"step": 1})
    (tmp_path / ".tmp-step-000002-123").mkdir()  # a run killed mid-save
    (tmp_path / "step-000003").mkdir()  # no manifest: never completed
    assert latest_checkpoint(tmp_path).name == "step-000001"
