"""`forethought predgen speed`: the "before" sides its speed-ups are measured against compute what the new code
computes (the re-run decoder writes the KV-cached decoder's tokens; one pass over every deepest path gives the
level walk's distribution), on a tiny random Llama; and its bad settings are refused as the config loads."""

from __future__ import annotations

import pytest
from cli_harness import expect_clean_failure

torch = pytest.importorskip("torch")

from forethought.predgen.decoding import AnswerTrie, answer_distribution, constrained_greedy  # noqa: E402
from forethought.predgen.speed import all_paths_distribution, rerun_greedy  # noqa: E402
from forethought.testing import tiny_llama  # noqa: E402

IDS = torch.tensor([[0, 0, 3, 4, 5], [2, 3, 4, 11, 7], [0, 9, 8, 7, 6]])
MASK = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 1, 1]])  # left-padded


def test_rerun_decoder_writes_the_cached_decoders_tokens() -> None:
    lm = tiny_llama(vocab_size=40, hidden_size=32, layers=2, heads=4, eos_token_id=1).double()
    g = torch.Generator().manual_seed(0)
    trie = AnswerTrie([torch.randint(2, 40, (4,), generator=g).tolist() + [1] for _ in range(12)], list(range(12)))
    cached = constrained_greedy(lm, trie, IDS, MASK).tokens
    assert torch.equal(rerun_greedy(lm, trie, IDS, MASK), cached)
    assert cached.shape == (3, 5)


@pytest.mark.parametrize("max_rows", [256, 2])
def test_all_paths_distribution_is_the_level_walks(max_rows: int) -> None:
    """A number-like trie (every answer 3 tokens, shared prefixes); chunks and row limits small enough to split."""
    lm = tiny_llama(vocab_size=40, hidden_size=32, layers=2, heads=4, eos_token_id=1).double()
    seqs = [[a, b, c] for a in (5, 6) for b in (7, 8, 9) for c in (10, 11)]
    trie = AnswerTrie(seqs, [float(i) for i in range(len(seqs))])
    before = all_paths_distribution(lm, trie, IDS, MASK, chunk=4, max_rows=max_rows)
    after = answer_distribution(lm, trie, IDS, MASK)
    assert before.shape == (3, len(seqs))
    assert torch.allclose(before.sum(-1), torch.ones(3, dtype=torch.float64))
    assert (before - after).abs().max() < 1e-6  # fp32 log-softmax inside the old pass


@pytest.mark.parametrize("args,names", [
    (["--text_task", "sst2"], ["text_task", "multiple-choice", "sst2"]),
    (["--steps", "0"], ["steps", "0"]),
    (["--base", " "], ["base"]),
])
def test_bad_settings_refused_before_anything_loads(tmp_path, args: list[str], names: list[str]) -> None:
    runs = tmp_path / "runs"
    expect_clean_failure(["predgen", "speed", "--run.out_dir", str(runs), *args], tmp_path, runs, names,
                         in_process=True)
    assert not runs.exists()
