"""How many answer tokens each PredGen method generates per task: the answer text's tokens under the base's
tokenizer (SmolLM2's, ``" " + answer``) plus EOS, as the Encoder writes them, over the task's train and eval
examples. Single-token answers (one label token + EOS) leave scheduled sampling and the adapter nothing to act
on; this is the table that says which tasks can separate the methods.

    FORETHOUGHT_DATA=../shared/data python benchmarks/predgen_answer_tokens.py [--tasks sst2 arc-easy ...]

Writes ``benchmarks/results/predgen_answer_tokens.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results"

# (task, answer format): the built-in tasks, multiple-choice ones answered both ways
TASKS = [("sst2", "letter"), ("boolq", "letter"), ("arc-easy", "letter"), ("arc-easy", "text"),
         ("arc-challenge", "text"), ("piqa", "letter"), ("piqa", "text"), ("stsb", "letter"), ("sick", "letter"),
         ("wassa", "letter")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="smollm2-135m", help="whose tokenizer")
    args = ap.parse_args()
    os.environ.setdefault("FORETHOUGHT_DATA", str(ROOT.parent / "shared" / "data"))
    from transformers import AutoTokenizer

    from forethought.core.env import resolve_model_path
    from forethought.predgen.config import TaskConfig
    from forethought.predgen.data import load_split
    from forethought.predgen.methods import Encoder, PromptConfig

    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(resolve_model_path(args.base))
    rows = {}
    for name, answer in TASKS:
        spec, train_ex, eval_ex = load_split(TaskConfig(name=name, answer=answer), 0)
        enc = Encoder(spec, tok, PromptConfig(), decode=False)
        lens = [len(enc.answer_tokens(enc.answer_text(ex))) + 1 for ex in train_ex + eval_ex]  # + EOS
        prompts = [len(enc.prompt_tokens(ex)) for ex in eval_ex[:500]]
        row = {"task_type": spec.task_type, "answer": answer, "examples": len(lens),
               "answer_tokens_min": min(lens), "answer_tokens_mean": statistics.fmean(lens),
               "answer_tokens_max": max(lens), "prompt_tokens_mean_first_500_eval": statistics.fmean(prompts)}
        if spec.task_type == "classification" and spec.answer == "label":
            row["label_tokens"] = {w: tok.convert_ids_to_tokens(enc.answer_tokens(w)) for w in spec.labels}
        rows[f"{name} ({answer})" if spec.task_type == "classification" else name] = row
        print(name, answer, row["answer_tokens_mean"], flush=True)
    res = {"command": " ".join(["python", *sys.argv]), "tokenizer": args.base,
           "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count()}, "wall_s": time.time() - t0,
           "note": "answer tokens include the EOS every method writes; regression answers are fixed 2-decimal "
                   "numbers (prompt.decimals 2)", "tasks": rows}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "predgen_answer_tokens.json").write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
