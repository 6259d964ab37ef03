"""``forethought psf ceiling``: the planted corpus's Bayes-optimal parallel decoders. The predictive state is the
exact filtered topic belief (checked against enumerating every topic path); the decoders order as they must (the
landing token helps, a code naming each block's topic reaches the data's persistence); bad input fails in one
line."""

import itertools
import json

import numpy as np
import pytest
from cli_harness import expect_clean_failure

from forethought import cli
from forethought.data.planted import PlantedConfig, build_generator, sample_documents
from forethought.psf.ceiling import draw_rows, predictive_states

TINY = PlantedConfig(topics=3, vocab_size=6, topic_vocab=3, blocks=3, block_tokens=2, stay_prob=0.7)


def test_predictive_state_is_the_topic_posterior_given_the_blocks_before():
    gen = build_generator(TINY)
    docs = sample_documents(gen, 5, np.random.default_rng(0))[0]  # (5, 6)
    M, K, n = gen.topics, gen.blocks, gen.block_tokens
    got = predictive_states(gen, docs)  # (5, K, M)
    for d, x in enumerate(docs.reshape(5, K, n)):
        for k in range(K):
            joint = np.zeros(M)  # p(x_<k, z_k) by summing over every path z_1..z_k
            for path in itertools.product(range(M), repeat=k + 1):
                p = gen.initial[path[0]]
                for j in range(1, k + 1):
                    p *= gen.transition[path[j - 1], path[j]]
                for j in range(k):  # the blocks before k
                    p *= gen.start[path[j], x[j, 0]] * np.prod([gen.bigram[path[j], x[j, i - 1], x[j, i]]
                                                                for i in range(1, n)])
                joint[path[k]] += p
            np.testing.assert_allclose(got[d, k], joint / joint.sum(), rtol=1e-10)


def test_draw_rows_follows_unnormalised_rows():
    p = np.array([[1.0, 3.0, 0.0], [0.0, 0.0, 2.0]])
    idx = draw_rows(np.repeat(p[None], 20000, 0), np.random.default_rng(0))  # (20000, 2)
    assert np.mean(idx[:, 0] == 1) == pytest.approx(0.75, abs=0.02) and not np.any(idx[:, 0] == 2)
    assert np.all(idx[:, 1] == 2)


def test_the_decoders_order_as_they_must(tmp_path):
    """On the default corpus: the landing token adds persistence to exact states, a code naming each block's topic
    gives the data's persistence (within a few standard errors), and the run writes results.json."""
    assert cli.main(["psf", "ceiling", "--run.out_dir", str(tmp_path), "--run.name", "c", "--documents", "1500"]) == 0
    res = json.loads((tmp_path / "c" / "results.json").read_text())
    p = {k: res[k]["persistence"] for k in ("data", "exact_states", "exact_states_landing",
                                            "exact_states_landing_codes")}
    assert p["exact_states"]["mean"] + 5 * p["exact_states"]["se"] < p["exact_states_landing"]["mean"]
    assert p["exact_states_landing"]["mean"] + 5 * p["exact_states_landing"]["se"] < p["data"]["mean"]
    assert abs(p["exact_states_landing_codes"]["mean"] - p["data"]["mean"]) < 4 * p["data"]["se"] * 2 ** 0.5
    assert res["exact_states"]["block_coherence"]["mean"] < res["data"]["block_coherence"]["mean"]


@pytest.mark.parametrize("args,message", [(["--documents", "1"], "documents must be at least 2"),
                                          (["--planted.stay_prob", "2"], "planted: stay_prob must be in [0, 1]")])
def test_bad_input_fails_in_one_line(tmp_path, args, message):
    expect_clean_failure(["psf", "ceiling", "--run.out_dir", str(tmp_path), *args], tmp_path, tmp_path, [message],
                         in_process=True)


def test_the_results_page_cites_the_repository_s_ceiling():
    """The no-code ceiling the report shows is the collected psf_planted_ceiling result, at the precision shown."""
    from pathlib import Path

    from forethought.report.papers import PLANTED_NO_CODE_CEILING

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "psf_planted_ceiling.json"
    res = json.loads(path.read_text())
    m = res["groups"]["ceiling"]["measures"]
    assert round(m["states_landing_persistence"]["mean"], 3) == PLANTED_NO_CODE_CEILING.values["persistence"]
    assert m["states_landing_persistence_se"]["mean"] < 0.002
