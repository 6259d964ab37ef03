"""PredGen's methods are objects registered once (predgen/registry.py): the configs offer exactly the registry's
names and poolings, each method's facts are what the commands rely on, and the commands ask the registered
object (a toy method registered here is what validation, prediction and the learning curve consult); its loss
and head are the ones methods.py and model.py hold for its class. The config modules import no torch."""

from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path

import pytest

from forethought.core.errors import ForethoughtError
from forethought.predgen.config import HeadConfig, PredGenConfig, TaskConfig, with_task_defaults
from forethought.predgen.registry import METHODS, Method, PredGen, Predictor, method_named, trained_method_names
from forethought.testing import tiny_llama, tiny_llama_folder, write_csv

# name: (decodes, has a head, default pooling, head.reads applies, trains, answers twice)
FLAGS = {
    "predictor": (False, True, "last", False, True, False),
    "generator": (True, False, "", False, True, False),
    "predgen": (True, True, "attention", True, True, True),
    "base": (True, False, "", False, False, False),
}


def test_the_configs_offer_exactly_the_registrys_methods_and_poolings() -> None:
    method = typing.get_type_hints(PredGenConfig)["method"]
    assert typing.get_args(method) == tuple(METHODS) == tuple(FLAGS)
    pooling = typing.get_args(typing.get_type_hints(HeadConfig)["pooling"])
    assert set(pooling) == {""} | {p for m in METHODS.values() for p in m.poolings}
    assert trained_method_names() == ("predictor", "generator", "predgen")  # what a saved predgen.json may hold


@pytest.mark.parametrize("name", list(FLAGS))
def test_each_methods_facts(name: str) -> None:
    m = method_named(name)
    assert m.name == name
    assert (m.decodes, m.has_head, m.pooling(""), m.head_reads, m.trains, m.answers_twice) == FLAGS[name]
    assert m.pooling("mean") == "mean"  # a configured pooling wins


def test_unknown_names_and_empty_methods_are_refused() -> None:
    from forethought.predgen.methods import training_loss

    with pytest.raises(ForethoughtError, match="unknown method 'predgne'.*did you mean 'predgen'"):
        method_named("predgne")
    assert method_named(METHODS["generator"]) is METHODS["generator"]
    with pytest.raises(ValueError, match="neither decodes nor has a head"):
        Method("nothing", decodes=False)
    with pytest.raises(ForethoughtError, match="base method trains nothing"):
        training_loss(METHODS["base"], PredGenConfig(method="base"), None)  # type: ignore[arg-type]


def test_config_validation_asks_the_registered_method(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = PredGenConfig(method="predictor")
    cfg.head.pooling = "last"
    cfg.validate()
    monkeypatch.setitem(METHODS, "predictor", Predictor("predictor", decodes=False, poolings=("mean",)))
    with pytest.raises(ForethoughtError, match="head.pooling last does not apply to the predictor's head; use mean"):
        cfg.validate()
    cfg.head.pooling, cfg.head.reads, cfg.eval.decoder = "", "logits", "rank"
    monkeypatch.setitem(METHODS, "predictor", Predictor("predictor", decodes=True, poolings=("last",),
                                                        head_reads=True))
    cfg.validate()  # a predictor that read answers and decoded would take head.reads and the rank decoder


LMEVAL = "Question: {question}\nAnswer:"
# (method, task, answer, given head) -> (adapter it reads, starting β, task.template: '' = the task's own, which
# lists the choices)
TASK_DEFAULTS = [
    ("predgen", "arc-easy", "text", {}, ("choices", 0.0, LMEVAL)),  # T(Z) against the choices' states
    ("predgen", "arc-easy", "text", {"reads": "choices"}, ("choices", 0.0, LMEVAL)),
    ("predgen", "arc-easy", "text", {"reads": "choices_loglik"}, ("choices", 1.0, LMEVAL)),  # the likelihood variant
    ("predgen", "arc-easy", "text", {"reads": "choices", "choice_loglik": 1.0}, ("choices", 1.0, LMEVAL)),
    ("predgen", "arc-easy", "text", {"reads": "choices_loglik", "choice_loglik": 0.5}, ("choices", 0.5, LMEVAL)),
    ("predgen", "arc-easy", "text", {"reads": "states"}, ("states", 0.0, LMEVAL)),
    ("predgen", "arc-easy", "letter", {}, ("states", 0.0, "")),
    ("predgen", "arc-easy", "name", {}, ("states", 0.0, "")),
    ("predgen", "sst2", "letter", {}, ("states", 0.0, "")),
    ("generator", "arc-challenge", "text", {}, ("states", 0.0, LMEVAL)),
    ("base", "piqa", "text", {}, ("states", 0.0, "Question: {goal}\nAnswer:")),
    ("predictor", "arc-easy", "text", {}, ("states", 0.0, "")),  # it writes nothing: its prompt lists the choices
    ("predgen", "hellaswag", "text", {}, ("choices", 0.0, "")),  # no lm-eval prompt offered: the task's own
]


@pytest.mark.parametrize("method,task,answer,head,expected", TASK_DEFAULTS,
                         ids=[f"{m}-{t}-{a}-{'-'.join(map(str, h.values()))}" for m, t, a, h, _ in TASK_DEFAULTS])
def test_task_dependent_defaults(method: str, task: str, answer: str, head: dict, expected: tuple) -> None:
    """head.reads auto, head.choice_loglik and the text-answer prompt resolve from the task and the method (the
    run's config records them); the given config is left as it was; a given prompt always wins."""
    cfg = PredGenConfig(method=method, task=TaskConfig(name=task, answer=answer), head=HeadConfig(**head))
    cfg.validate()
    out = with_task_defaults(cfg)
    assert (out.head.reads, out.head.choice_loglik, out.task.template) == expected
    assert cfg.task.template == "" and cfg.head.reads == head.get("reads", "auto")
    own = TaskConfig(name=task, answer=answer, template="Q: {question}")
    assert with_task_defaults(PredGenConfig(method=method, task=own)).task.template == "Q: {question}"


class Echo(Method):
    """A toy: decodes, no head, trains nothing (a second base)."""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from forethought.predgen.config import PromptConfig
    from forethought.predgen.methods import Encoder
    from forethought.predgen.model import PredGenModel
    from forethought.predgen.tasks import load_task

    root = tmp_path_factory.mktemp("registry")
    rows = [{"id": f"r{i}", "text": ["good fine", "bad dull", "great film", "awful plot"][i % 4],
             "label": "positive" if i % 2 == 0 else "negative"} for i in range(8)]
    data = write_csv(root / "t.csv", rows)
    text = "\n".join(f"Review: {r['text']}\nAnswer: {r['label']}" for r in rows) * 4
    tok = tiny_llama_folder(root / "lm", text, 280, hidden_size=32, layers=2, heads=4, kv_heads=2)
    spec, ex = load_task(str(data), "train", 0, target_field="label", text_fields=["text"], id_field="id",
                         template="Review: {text}\nAnswer:")
    enc = Encoder(spec, tok, PromptConfig(max_prompt_tokens=32))
    lm = tiny_llama(vocab_size=len(tok), hidden_size=32, layers=2, heads=4, kv_heads=2,
                    eos_token_id=tok.eos_token_id)
    return {"enc": enc, "items": enc.encode(ex), "lm": lm, "model": PredGenModel}


def test_a_registered_toy_method_is_what_prediction_and_the_curve_consult(
        tiny: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    from forethought.predgen.commands import curve_eval_fn
    from forethought.predgen.methods import predict
    from forethought.predgen.model import build_head

    enc, items = tiny["enc"], tiny["items"]
    model = tiny["model"](tiny["lm"], None)
    monkeypatch.setitem(METHODS, "echo", Echo("echo", decodes=True, trains=False))
    echo = predict(model, "echo", enc, items, 4, -1)
    gen = predict(model, "generator", enc, items, 4, -1)
    assert echo.prediction == echo.decoded == gen.prediction and echo.decoded_text == gen.decoded_text
    point = curve_eval_fn("echo", enc, items, 4, -1, "cpu")(model, 1)
    assert "accuracy" in point and not any(k.startswith("decoded_") for k in point)

    # a toy with a head that reads its answer (PredGen's adapter, with other facts): the curve scores the decoded
    # answer beside the head's
    reader = PredGen("reader", decodes=True, poolings=("mean",))
    monkeypatch.setitem(METHODS, "reader", reader)
    head = build_head(reader, 32, enc.n_out, reader.pooling(""), 8, None)
    assert head.pool.pooling == "mean"
    point = curve_eval_fn("reader", enc, items, 4, -1, "cpu")(tiny["model"](tiny["lm"], head), 1)
    assert {"accuracy", "decoded_accuracy"} <= set(point)


def test_the_config_modules_import_no_torch() -> None:
    code = ("import sys, forethought.predgen.config, forethought.predgen.registry, forethought.predgen.compare; "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    src = Path(__file__).resolve().parents[1] / "src"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "[]", out.stdout


def test_each_methods_loss_and_head_are_its_own(tiny: dict) -> None:
    """The registered loss calls the method's loss function with the run's settings; the heads match the method
    (and, for PredGen, what its adapter reads)."""
    import torch

    from forethought.predgen.methods import generator_loss, predgen_loss, predictor_loss, training_loss, with_sampling
    from forethought.predgen.model import ChoiceAdapter, LogitAdapter, PoolingHead, TaskAdapter, build_head

    enc, items = tiny["enc"], tiny["items"]
    batch = with_sampling(enc.collate(items[:4]), 0.5, 7)
    cfg = PredGenConfig(layer=-2, mask_prompt=False)
    direct = {"predictor": lambda m: m(predictor_loss, batch, "classification", -2),
              "generator": lambda m: m(generator_loss, batch, False),
              "predgen": lambda m: m(predgen_loss, batch, cfg.predgen, enc, "classification", -2, False)}
    for name, call in direct.items():
        method = METHODS[name]
        head = build_head(method, 32, enc.n_out, method.pooling(""), 8, None)
        model = tiny["model"](tiny["lm"], head)
        got, want = training_loss(method, cfg, enc)(model, batch)[0], call(model)[0]
        as_float = (lambda x: float(x)) if isinstance(got, torch.Tensor) else (lambda x: float(x.value()))
        assert as_float(got) == pytest.approx(as_float(want)), name
    assert isinstance(build_head(METHODS["predictor"], 32, 2, "mean", 8, 0.5), PoolingHead)
    assert build_head(METHODS["generator"], 32, 2, "", 8, None) is None
    assert build_head(METHODS["base"], 32, 2, "", 8, None) is None
    assert build_head("predictor", 32, 2, "mean", 8, None).pooling == "mean"  # a name resolves as before
    predgen = METHODS["predgen"]
    assert type(build_head(predgen, 32, 2, "attention", 8, None)) is TaskAdapter
    assert type(build_head(predgen, 32, 2, "attention", 8, None, "logits", 50)) is LogitAdapter
    assert type(build_head(predgen, 32, 2, "attention", 8, None, "choices")) is ChoiceAdapter
    assert build_head(predgen, 32, 2, "attention", 8, None, "choices").alpha.item() == ChoiceAdapter.ALPHA0
    assert build_head(predgen, 32, 2, "attention", 8, None, "choices", choice_alpha=0.0).alpha.item() == 0.0
    reg = build_head(predgen, 32, 1, "mean", 8, 2.5)  # regression: starts at the mean target
    assert reg.mlp[-1].bias.item() == 2.5
