"""``forethought predgen answer-tokens``: how many tokens a task's answers take, as the Encoder writes them (the
answer text, ``" " + answer``, under the base's tokenizer, plus the EOS every method writes), over the task's
train and eval examples, and how long its prompts are.

With a single-token answer (one label word + EOS) every method decides from the last prompt state: scheduled
sampling and PredGen's adapter have nothing to act on. This count says which tasks can separate the methods.
"""

from __future__ import annotations

import statistics
from typing import Any

from forethought.core.run import Run
from forethought.data.tokenizers import load_tokenizer
from forethought.predgen.config import AnswerTokensConfig
from forethought.predgen.data import load_split
from forethought.predgen.methods import Encoder


def count(enc: Encoder, examples: list, prompt_examples: list) -> dict[str, Any]:
    """Answer lengths in tokens (EOS included) over ``examples`` and the mean prompt length over
    ``prompt_examples``."""
    lens = [len(enc.answer_tokens(enc.answer_text(ex))) + 1 for ex in examples]
    prompts = [len(enc.prompt_tokens(ex)) for ex in prompt_examples]
    return {"examples": len(lens), "answer_tokens_min": min(lens), "answer_tokens_mean": statistics.fmean(lens),
            "answer_tokens_max": max(lens), "prompt_examples": len(prompts),
            "prompt_tokens_mean": statistics.fmean(prompts)}


def run(cfg: AnswerTokensConfig, resume: str | None = None) -> dict[str, Any]:
    tok = load_tokenizer(cfg.base)
    spec, train_ex, eval_ex = load_split(cfg.task, cfg.run.seed)
    enc = Encoder(spec, tok, cfg.prompt, decode=False)  # no trie: counting needs none
    out = Run.create(cfg.run.out_dir, cfg.run.name, cfg).start()
    results: dict[str, Any] = {"task": spec.name, "task_type": spec.task_type, "answer": cfg.task.answer,
                               "tokenizer": cfg.base,
                               **count(enc, train_ex + eval_ex, eval_ex[:cfg.prompt_examples])}
    if spec.task_type == "classification" and spec.answer == "label":  # one word per class: show its tokens
        results["label_tokens"] = {w: tok.convert_ids_to_tokens(enc.answer_tokens(w)) for w in spec.labels}
    out.write_results(results)
    print(f"{spec.name} ({cfg.task.answer}): {results['examples']:,} examples, answer tokens (with EOS) "
          f"{results['answer_tokens_min']} / {results['answer_tokens_mean']:.2f} / {results['answer_tokens_max']} "
          f"(min / mean / max); prompt {results['prompt_tokens_mean']:.1f} tokens on average")
    return results
