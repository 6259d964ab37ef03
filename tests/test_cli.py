"""The real CLI path: help, one-line errors with exit status 2, SIGKILL + --resume auto, 2-process training."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from forethought.cli import main

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
BIN = Path(sys.executable).parent


def test_help_lists_commands_and_keys(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "myopia synthetic" in out and "myopia probe" in out and "demo" in out
    with pytest.raises(SystemExit) as e:
        main(["myopia", "synthetic", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "--train.steps" in out and "--task.frequency" in out and "presets:" in out


@pytest.mark.parametrize("argv", [["--help"], ["myopia", "synthetic", "--help"]])
def test_help_into_a_closed_pipe_prints_no_traceback(argv):
    """`forethought --help | head -1`: the reader leaves before the help is written."""
    proc = subprocess.Popen([str(BIN / "forethought"), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=ENV)
    proc.stdout.close()  # before the console script has even imported forethought
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) in (0, 1) and err == "", err


# Runs the console script's main() in a fresh interpreter and reports, as its last stderr line, the exit status and
# which heavy libraries got imported.
_IMPORTS = ("import json, sys\nfrom forethought.cli import main\ntry:\n    code = main(sys.argv[1:])\n"
            "except SystemExit as e:\n    code = e.code\nheavy = [m for m in ('torch', 'numpy', 'transformers', "
            "'accelerate', 'peft') if m in sys.modules]\nprint(json.dumps([code, heavy]), file=sys.stderr)")


@pytest.mark.parametrize("argv,code", [
    (["--help"], 0),
    (["myopia", "synthetic", "--bogus", "1"], 2),
    (["myopia", "synthetic", "--help"], 0),
    (["myopia", "lm", "--config", "tiny", "--gpt.n_head", "3"], 2),
    (["myopia", "gradients", "--help"], 0),
    (["myopia", "probe", "--k_max", "0", "--lm_run", "x"], 2),
    (["demo", "--help"], 0),
    (["demo", "--systems", "[nope]"], 2),
    (["predgen", "train", "--help"], 0),
    (["predgen", "train", "--config", "tiny", "--method", "predgenn"], 2),
    (["predgen", "train", "--config", "paper"], 2),  # a preset family: refused before anything loads
    (["predgen", "eval", "--eval.batch_size", "0", "--run_dir", "x"], 2),
    (["predgen", "predict", "--help"], 0),
    (["predgen", "compare", "--help"], 0),
    (["predgen", "mine", "--help"], 0),
    (["predgen", "speed", "--steps", "0"], 2),
    (["predgen", "answer-tokens", "--help"], 0),
    (["presets", "memory", "--usable", "2"], 2),
    (["psf", "recipe", "--help"], 0),
    (["psf", "recipe", "--config", "tiny", "--model.blocks", "0"], 2),
    (["psf", "sample", "--help"], 0),
    (["psf", "diagnose", "--samples", "0", "--run_dir", "x"], 2),
    (["psf", "eval", "--help"], 0),
    (["psf", "token-flow", "--help"], 0),
    (["psf", "ceiling", "--documents", "1"], 2),
])
def test_help_and_bad_settings_import_no_torch(argv: list[str], code: int, tmp_path: Path) -> None:
    """The configs of these commands live in torch-free modules, so ``--help`` and a mistake in the settings
    answer before torch, numpy or transformers load (a fresh interpreter: this one holds them all)."""
    out = subprocess.run([sys.executable, "-c", _IMPORTS, *argv, "--run.out_dir", str(tmp_path / "runs")],
                         env=ENV, capture_output=True, text=True, timeout=120)
    assert json.loads(out.stderr.strip().splitlines()[-1]) == [code, []], out.stderr[-2000:]
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("argv,msg", [
    (["myopia", "synthetic", "--train.stepz", "3"], "unknown config key 'train.stepz'"),
    (["myopia", "nope"], "unknown command 'myopia nope'"),
    (["myopia", "synthetic", "--config", "nosuchpreset"], "neither a YAML file nor a preset"),
    (["myopia", "synthetic", "--modes", "[bogus]"],
     "config key 'modes' must be one of 'vanilla', 'detach_hidden', 'detach_kv', 'zero_past', got 'bogus'"),
    (["myopia", "lm", "--data.corpus", "no-such-corpus"], "unknown corpus"),
    (["myopia", "probe"], "--lm_run"),
])
def test_bad_input_one_line_error(argv, msg, capsys, tmp_path):
    code = main(argv + ["--run.out_dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 2
    assert msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    if "corpus" not in msg:
        assert not (tmp_path / "runs").exists()  # nothing half-written


def test_empty_corpus_error(capsys, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("   \n")
    code = main(["myopia", "lm", "--config", "tiny", "--data.corpus", str(empty), "--run.out_dir", str(tmp_path)])
    assert code == 2 and "empty" in capsys.readouterr().err.lower()


def _cli(*args: str) -> list[str]:
    return [str(BIN / "forethought"), "myopia", "synthetic", "--config", "tiny", "--modes", "[vanilla]",
            "--eval_sequences", "64", "--probe.train_sequences", "32", "--probe.test_sequences", "16", *args]


def test_sigkill_then_resume_auto_reaches_same_weights(tmp_path):
    common = ["--train.steps", "300", "--train.checkpoint_every", "20", "--train.keep_checkpoints", "2"]
    ref = subprocess.run(_cli(*common, "--run.out_dir", str(tmp_path), "--run.name", "ref"), env=ENV,
                         capture_output=True, text=True, timeout=300)
    assert ref.returncode == 0, ref.stderr
    run_dir = tmp_path / "killed" / "p=1" / "vanilla"
    proc = subprocess.Popen(_cli(*common, "--run.out_dir", str(tmp_path), "--run.name", "killed"), env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while time.time() < deadline and not (run_dir / "step-000060").exists():
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (run_dir / "step-000300").exists(), "the run finished before it could be killed"
    resumed = subprocess.run(_cli(*common, "--run.out_dir", str(tmp_path), "--run.name", "killed",
                                  "--resume", "auto"), env=ENV, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stdout
    a = load_file(str(tmp_path / "ref" / "p=1" / "vanilla" / "step-000300" / "model.safetensors"))
    b = load_file(str(run_dir / "step-000300" / "model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        assert (a[k] == b[k]).all(), k
    steps = [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps))  # redone steps are not logged twice


def test_two_process_training_matches_one_process(tmp_path):
    args = ["--train.steps", "20", "--train.batch_size", "16", "--train.log_every", "5"]
    one = subprocess.run(_cli(*args, "--run.out_dir", str(tmp_path), "--run.name", "one"), env=ENV,
                         capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr
    cmd = [str(BIN / "torchrun"), "--nproc-per-node", "2", "--master-port", "29533", "-m", "forethought.cli",
           *_cli(*args, "--run.out_dir", str(tmp_path), "--run.name", "two")[1:]]
    two = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stderr[-2000:]
    res = [json.loads((tmp_path / n / "p=1" / "vanilla" / "results.json").read_text()) for n in ("one", "two")]
    assert res[0]["world_size"] == 1 and res[1]["world_size"] == 2
    l1 = [loss for _, loss in res[0]["curve"]]
    l2 = [loss for _, loss in res[1]["curve"]]
    assert len(l1) == len(l2) == 4
    # Same global batch, gradients averaged by DDP: equal up to float32 reduction order.
    assert max(abs(a - b) for a, b in zip(l1, l2, strict=True)) < 1e-4


def test_fresh_run_refuses_to_mix_with_existing_checkpoints(tmp_path, capsys):
    args = ["myopia", "synthetic", "--config", "tiny", "--modes", "[vanilla]", "--train.steps", "2",
            "--eval_sequences", "16", "--probe.train_sequences", "32", "--probe.test_sequences", "16",
            "--run.out_dir", str(tmp_path)]
    assert main(args) == 0
    capsys.readouterr()
    assert main(args) == 2
    assert "--resume auto" in capsys.readouterr().err
    assert main(args + ["--resume", "auto"]) == 0  # finished: nothing to redo


def test_readme_template_example_keeps_newlines_and_strings(tmp_path):
    """README's example, typed as on a shell: the template's ``\\n`` become newlines (not backslash-n, not YAML),
    and a string-list override keeps its items as strings (``[no, yes]`` stays two words)."""
    from forethought.core.config import load_config
    from forethought.predgen.commands import PredGenConfig
    from forethought.predgen.tasks import load_task, render_prompt
    from forethought.testing import tiny_llama_folder, write_csv

    rows = [{"title": f"t{i}", "body": "good" if i % 2 else "bad", "score": f"{i % 5}.5"} for i in range(12)]
    data = write_csv(tmp_path / "my.csv", rows)
    base = tmp_path / "tiny"
    tiny_llama_folder(base, "Title: t1\nBody: good\nScore: 1.5" * 20, 280, hidden_size=16, layers=1, heads=2,
                      kv_heads=1)
    # README: --task.text_fields "[title, body]" --task.template "Title: {title}\nBody: {body}\nScore:"
    readme = ["--task.name", str(data), "--task.target_field", "score", "--task.task_type", "regression",
              "--task.text_fields", "[title, body]", "--task.template", r"Title: {title}\nBody: {body}\nScore:"]
    out = subprocess.run([str(BIN / "forethought"), "predgen", "train", "--method", "predictor", "--base", str(base),
                          *readme, "--train.steps", "1", "--train.batch_size", "4", "--eval.latency_examples", "0",
                          "--run.out_dir", str(tmp_path / "runs"), "--run.name", "readme"],
                         env=ENV, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    saved = load_config(PredGenConfig, tmp_path / "runs" / "readme" / "config.yaml")
    assert saved.task.template == "Title: {title}\nBody: {body}\nScore:"
    assert saved.task.text_fields == ["title", "body"]
    spec, examples = load_task(str(data), "train", 0, target_field="score", task_type="regression",
                               text_fields=saved.task.text_fields, template=saved.task.template)
    assert render_prompt(spec, examples[0]).splitlines()[1].startswith("Body: ")
    labels = load_config(PredGenConfig, None, ["--task.labels", "[no, yes]", "--task.template", "Review: {text}"])
    assert labels.task.labels == ["no", "yes"] and labels.task.template == "Review: {text}"
