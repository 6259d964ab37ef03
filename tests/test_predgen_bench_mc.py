"""benchmarks/predgen_mc.py --quick: the whole pipeline (runs, archive, collection, selection on validation)
on the fake data root and a tiny random Llama, in seconds."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from test_predgen_tasks import _make_root

from forethought.testing import tiny_llama_folder

ROOT = Path(__file__).resolve().parents[1]


def test_predgen_mc_quick(tmp_path: Path) -> None:
    base = tmp_path / "tiny"
    tiny_llama_folder(base, "Question: which option\nAnswer: A B C D E option 0 1 2 3 4 answer1 answer2 " * 20, 300,
                      hidden_size=16, layers=1, heads=2, kv_heads=1)
    env = {**os.environ, "FORETHOUGHT_DATA": str(_make_root(tmp_path / "data")), "HF_HUB_OFFLINE": "1",
           "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(ROOT / "benchmarks" / "predgen_mc.py"), "--quick", "--threads", "1", "--variants",
           "base-lmeval", "predgen-choices", "--runs-dir", str(tmp_path / "runs"),
           "--results-dir", str(tmp_path / "out"), "--", "--base", str(base)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads((tmp_path / "out" / "predgen_mc_quick.json").read_text())
    arc = res["tasks"]["arc-easy"]
    assert {"base-lmeval", "predgen-choices"} == arc["methods"].keys()
    assert {"rank", "rank_norm", "decoded"} <= arc["methods"]["base-lmeval"].keys()
    assert "validation" in arc["methods"]["predgen-choices"]
    assert arc["selected_on_validation"] == "predgen-choices"
    pair = arc["paired"]["predgen-choices_minus_predgen-choices_decoded"]
    assert pair["seeds"] == [0] and "ci95" in pair["per_seed"]["0"]
    assert "predgen-choices_minus_base-lmeval_rank" in arc["paired"]
    assert (tmp_path / "out" / "predgen_mc_quick.png").is_file()
    # resumable: the archive alone reproduces the collection
    archived = sorted(p.name for p in (tmp_path / "out" / "runs" / "predgen_mc_quick").iterdir())
    assert archived == ["arc-easy-base-lmeval-s0.json", "arc-easy-predgen-choices-s0.json", "invocations.txt"]
    spec = importlib.util.spec_from_file_location("predgen_mc", ROOT / "benchmarks" / "predgen_mc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["--quick", "--collect-only", "--runs-dir", str(tmp_path / "gone"), "--results-dir",
                 str(tmp_path / "out")])  # in this process: collecting needs no fresh interpreter
    again = json.loads((tmp_path / "out" / "predgen_mc_quick.json").read_text())
    assert again["tasks"]["arc-easy"]["methods"] == arc["methods"]
    assert again["command"].startswith(res["command"])  # the training invocation is kept beside the archive
