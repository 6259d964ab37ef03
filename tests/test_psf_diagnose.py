"""``forethought psf diagnose`` on a tiny recipe run of the planted corpus: every part of diagnose.json, the
identity permutation costs exactly nothing, the block-cut AR model sees the first block as in full context, and
bad inputs fail in one line with nothing written."""

import json
import math
import shutil

import numpy as np
import pytest
import torch
from cli_harness import expect_clean_failure, snapshot
from test_planted import PLANTED_TINY  # the tiny planted-corpus settings the PSF tests share

from forethought import cli
from forethought.core.config import load_config
from forethought.core.errors import ForethoughtError
from forethought.data.corpora import eval_windows
from forethought.psf.ar import ar_token_nll, block_diagonal_causal_mask
from forethought.psf.diagnose import (
    GROUPS,
    DiagnoseConfig,
    code_usage,
    derangements,
    diagnose,
    distinct_ngrams,
    first_token_ce,
    group_means,
    sample_measures,
    state_shuffle_cost,
    topic_information,
)
from forethought.psf.generate import load_recipe
from forethought.testing import finite_numbers

QUICK = ["--n_boot", "200", "--samples", "8", "--permutations", "2", "--batch_size", "16"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """base -> codes -> prior -> ar on the planted corpus (seconds): a stage with codes, a prior, the AR baseline."""
    out = tmp_path_factory.mktemp("diag")
    mp = pytest.MonkeyPatch()
    mp.setenv("FORETHOUGHT_CACHE", str(out / "cache"))
    try:
        assert cli.main(["psf", "recipe", "--config", "tiny", "--run.out_dir", str(out), "--run.name", "pl",
                         "--landing.enabled", "false", "--self_realized.enabled", "false",
                         "--longer_blocks.blocks", "[]", "--prior.state_only_variant", "true", *PLANTED_TINY]) == 0
    finally:
        mp.undo()
    return out / "pl"


def test_diagnose_writes_every_part(run, capsys):
    before = snapshot(run)
    assert cli.main(["psf", "diagnose", "--recipe_run", str(run), "--all_stages", "true", *QUICK]) == 0
    printed = capsys.readouterr().out
    assert "state-shuffle cost" in printed and "ceiling" in printed and "decoding" in printed
    after = snapshot(run)
    assert set(after) - set(before) == {"diagnose.json"}  # nothing else written or changed
    assert all(after[k] == v for k, v in before.items())
    res = json.loads((run / "diagnose.json").read_text())
    assert res["stage"] == "codes" and res["corpus"] == "planted" and res["eval_sequences"] == 32
    assert set(res["shuffle"]) == {"codes", "base"}
    assert set(res["shuffle"]["codes"]["modes"]) == {"posterior_mean", "zeroed", "shuffled_with_states"}
    assert set(res["shuffle"]["base"]["modes"]) == {"none"}
    for r in res["shuffle"].values():
        for m in r["modes"].values():
            for g in GROUPS:
                lo, hi = m[g]["interval"]
                assert lo <= m[g]["diff"] <= hi
                assert m[g]["diff"] == pytest.approx(m[g]["shuffled"] - m[g]["true"])
            assert len(m["diff_per_block"]) == 4
    for mode in ("posterior_mean", "zeroed"):  # s_1 is the learned start state of every document
        assert res["shuffle"]["codes"]["modes"][mode]["diff_per_block"][0] == pytest.approx(0.0, abs=1e-6)
    assert res["shuffle"]["base"]["modes"]["none"]["diff_per_block"][0] == pytest.approx(0.0, abs=1e-6)
    assert res["ceiling"]["available"] and res["ceiling"]["cut"] == "restart"
    assert res["ceiling"]["diff_per_block"][0] == pytest.approx(0.0, abs=1e-5)  # block 1: the same context
    dec = res["decoding"]
    for src in ("data", "clean", "prior", "mean"):
        assert {"true_nll", "persistence", "block_coherence", "distinct_2", "distinct_3"} <= set(dec[src]), src
        assert dec[src]["n"] == 8
    assert {"same_source", "other_source"} == set(dec["clean"]["topic_agreement"])
    assert dec["data"]["true_nll"]["mean"] < dec["prior"]["true_nll"]["mean"]  # a few steps: far from the data
    assert finite_numbers(res) > 100


def test_identity_permutation_costs_exactly_nothing(run):
    art = load_recipe(run)
    windows = eval_windows(art.valid_tokens, 12, art.model.seq_len)
    res = state_shuffle_cost(art.model, windows, [torch.arange(12), torch.arange(12)], batch=5, n_boot=50)
    assert set(res["modes"]) == {"posterior_mean", "zeroed", "shuffled_with_states"}
    for m in res["modes"].values():
        for g in GROUPS:
            assert m[g]["diff"] == 0.0 and m[g]["interval"] == [0.0, 0.0] and m[g]["true"] == m[g]["shuffled"]
        assert m["diff_per_block"] == [0.0] * 4
    shuffled = state_shuffle_cost(art.model, windows, derangements(12, 2, torch.Generator().manual_seed(0)),
                                  batch=5, n_boot=50)
    assert shuffled["modes"]["zeroed"]["all"]["diff"] != 0.0


@pytest.mark.parametrize("cut", ["restart", "mask"])
def test_block_cut_ar_sees_the_first_block_as_in_full_context(run, cut):
    art = load_recipe(run)
    w = eval_windows(art.valid_tokens, 6, art.model.seq_len)
    n = art.model.block_len
    with torch.no_grad():
        full = ar_token_nll(art.ar, w, art.bos_id)
        blocked = ar_token_nll(art.ar, w, art.bos_id, cut_every=n, cut=cut)
    assert full.shape == blocked.shape == (6, 32)
    torch.testing.assert_close(blocked[:, :n], full[:, :n], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(blocked[:, n:], full[:, n:])  # later blocks lost their context
    # cutting the context is what it says: a later block's loss does not depend on earlier blocks' tokens
    w2 = w.clone()
    w2[:, :n] = (w2[:, :n] + 1) % 32
    with torch.no_grad():
        torch.testing.assert_close(ar_token_nll(art.ar, w2, art.bos_id, cut_every=n, cut=cut)[:, n:], blocked[:, n:])


def test_small_helpers():
    m = block_diagonal_causal_mask(6, 3)
    assert m.tolist()[3] == [False, False, False, True, False, False] and m[5, 3] and not m[2, 3]
    for p in derangements(5, 20, torch.Generator().manual_seed(1)):
        assert sorted(p.tolist()) == list(range(5)) and not torch.any(p == torch.arange(5))
    nll = torch.arange(12.0).view(2, 6)  # blocks of 3: first tokens 0, 3 | 6, 9
    g = group_means(nll, 3)
    assert g["first"].tolist() == [1.5, 7.5] and g["all"].tolist() == [2.5, 8.5] and g["rest"].tolist() == [3.0, 9.0]
    assert distinct_ngrams(np.array([[1, 2, 1, 2, 1], [1, 2, 3, 4, 5]]), 2).tolist() == [0.5, 1.0]
    text = sample_measures(np.array([[1, 2, 1, 2], [3, 4, 5, 6]]), np.array([1.0, 2.0]), None)  # a text corpus
    assert set(text) == {"n", "distinct_2", "distinct_3", "unigram_entropy", "decoder_entropy"}
    no_codes = {"modes": {"none": {"first": {"true": 2.5}}}}  # a stage without codes: its own CE, nothing with codes
    assert first_token_ce(no_codes, 64) == {"with_codes": None, "without_codes": 2.5, "uniform": math.log(64)}


def test_bad_inputs_fail_in_one_line_and_write_nothing(run, tmp_path):
    base = ["psf", "diagnose", *QUICK]
    expect_clean_failure([*base, "--recipe_run", str(tmp_path / "nope")], tmp_path, tmp_path,
                         ["nope", "not a finished 'psf recipe' run folder"])
    unfinished = tmp_path / "unfinished"
    shutil.copytree(run, unfinished, ignore=shutil.ignore_patterns("diagnose.json"))
    (unfinished / "results.json").unlink()  # a run stopped before its last stage ended
    expect_clean_failure([*base, "--recipe_run", str(unfinished)], tmp_path, unfinished,
                         ["unfinished", "not a finished 'psf recipe' run folder"])
    expect_clean_failure(["psf", "diagnose"], tmp_path, tmp_path, ["--recipe_run"])
    expect_clean_failure([*base, "--recipe_run", str(run), "--eval_sequences", "1"], tmp_path, run,
                         ["eval_sequences must be at least 2"])
    before = snapshot(run)  # the same checks in-process, for speed
    with pytest.raises(ForethoughtError, match="^stage 'landing' was not trained in"):
        diagnose(DiagnoseConfig(recipe_run=str(run), stage="landing"))
    with pytest.raises(ForethoughtError, match=r"^top_p must be in \(0, 1\]"):
        load_config(DiagnoseConfig, None, ["--recipe_run", str(run), "--top_p", "0"])
    assert snapshot(run) == before


def test_a_run_without_the_ar_baseline_reports_the_ceiling_absent(run, tmp_path):
    no_ar = tmp_path / "no_ar"
    shutil.copytree(run, no_ar, ignore=shutil.ignore_patterns("diagnose.json", "ar"))
    assert cli.main(["psf", "diagnose", "--recipe_run", str(no_ar), "--eval_sequences", "8", *QUICK]) == 0
    res = json.loads((no_ar / "diagnose.json").read_text())
    assert res["ceiling"] == {"available": False, "reason": "the run has no AR baseline (train it with baselines: "
                                                            "[ar])"}
    assert res["eval_sequences"] == 8 and res["decoding"]["prior"]["available"]


# ---- the codes (issue 31) ---------------------------------------------------------------------------------------

def test_diagnose_measures_the_codes(run):
    res = json.loads((run / "diagnose.json").read_text()) if (run / "diagnose.json").is_file() else None
    if res is None:
        assert cli.main(["psf", "diagnose", "--recipe_run", str(run), *QUICK]) == 0
        res = json.loads((run / "diagnose.json").read_text())
    c = res["codes"]
    assert c["available"]
    z = c["zeroing_cost"]
    for g in GROUPS:
        assert z[g]["diff"] == pytest.approx(z[g]["zeroed"] - z[g]["posterior_mean"])
    assert len(z["diff_per_position"]) == 8 and len(z["diff_per_block"]) == 4
    assert np.mean(z["diff_per_position"]) == pytest.approx(z["all"]["diff"])
    f = res["first_token_ce"]  # the first token's CE with and without codes (the same teacher-forced passes)
    assert f["with_codes"] == pytest.approx(z["first"]["posterior_mean"])
    assert f["without_codes"] == pytest.approx(z["first"]["zeroed"])
    assert f["uniform"] == pytest.approx(math.log(32))
    u = c["usage"]
    assert sum(u["kl_parts_per_token"].values()) == pytest.approx(u["kl_per_token"])
    assert 0 <= u["active_units"] <= u["dims"] == 8 and len(u["per_dim"]["kl"]) == 8
    t = c["topics"]
    assert t["available"] and t["train_documents"] == 16 and t["test_documents"] == 16
    assert set(t["ce"]) == {"index", "state", "code", "state_code", "code_mean", "state_code_mean"}
    assert all(t["label_entropy"] <= v + 1e-6 for v in t["ce"].values())  # no probe beats the labels' entropy
    dec = res["decoding"]
    assert {"same_source", "other_source"} == set(dec["clean_zero_codes"]["topic_agreement"])
    assert dec["prior_state_only"]["available"] and dec["prior_state_only"]["n"] == 8  # the state-only variant


def test_the_two_configurations(run, capsys):
    """prior.state_only_variant: one code-trained decoder, two priors: the main one over states + codes and the
    state-only one (the same decoder then gets zero codes); psf sample picks either."""
    res = json.loads((run / "results.json").read_text())
    assert list(res["stages"]) == ["base", "codes", "prior", "prior_state_only", "ar"]
    art = load_recipe(run)
    assert art.prior.dim == art.model.state_dim + art.model.code_dim
    assert art.state_only_prior.dim == art.model.state_dim
    assert res["stages"]["prior"]["with_codes"] and not res["stages"]["prior_state_only"]["with_codes"]
    for which in ("main", "state_only"):
        assert cli.main(["psf", "sample", "--recipe_run", str(run), "--n", "2", "--prior", which, "--name",
                         f"s_{which}"]) == 0
        assert json.loads((run / f"s_{which}" / "results.json").read_text())["prior"] == which


@pytest.mark.parametrize("extra,message", [
    (["--codes.enabled", "false"], "prior.state_only_variant needs the codes stage"),
    (["--prior.model.state_only", "true"], "prior.model.state_only false")])
def test_state_only_variant_is_validated(tmp_path, extra, message):
    args = ["psf", "recipe", "--config", "tiny", "--run.out_dir", str(tmp_path), "--prior.state_only_variant",
            "true", *extra]
    expect_clean_failure(args, tmp_path, tmp_path, [message])


def test_code_usage_splits_the_kl_exactly():
    """KL(N(mu, sigma^2) || N(0, 1)) per dimension = mean shift + spread + sigma parts; a code whose mean is the
    same for every document carries its whole KL in the mean shift and has no active unit."""
    g = torch.Generator().manual_seed(0)
    mu = torch.randn(50, 4, 3, generator=g, dtype=torch.float64) * torch.tensor([0.0, 0.05, 2.0]) + 1.5
    logvar = torch.randn(50, 4, 3, generator=g, dtype=torch.float64) * 0.1 - 1.0
    u = code_usage(mu, logvar, block_len=5)
    kl = 0.5 * (mu.pow(2) + logvar.exp() - 1 - logvar).sum(-1).mean()  # nats per block
    assert u["kl_per_block"] == pytest.approx(float(kl))
    assert u["kl_per_token"] == pytest.approx(float(kl) / 5)
    assert u["active_units"] == 1  # only the dimension whose mean varies by more than 0.1 std
    assert u["per_dim"]["spread"][0] == pytest.approx(0.0) and u["per_dim"]["mean_shift"][0] == pytest.approx(1.125)


def test_topic_probes_see_a_code_that_names_the_topic():
    """A code that is the topic's one-hot (+ noise) carries about the labels' information and beyond the state;
    a code of pure noise carries about none."""
    g = torch.Generator().manual_seed(0)
    N, K, M = 200, 4, 3
    z = torch.randint(0, M, (N, K), generator=g)
    topics = torch.nn.functional.one_hot(z, M).double() * 0.97 + 0.01  # sharp soft labels
    states = torch.randn(N, K, 2, generator=g, dtype=torch.float64)
    named = torch.nn.functional.one_hot(z, M).double() + 0.1 * torch.randn(N, K, M, generator=g, dtype=torch.float64)
    noise = torch.randn(N, K, 5, generator=g, dtype=torch.float64)
    good = topic_information(states, named, topics.numpy(), sampled=named)
    bad = topic_information(states, noise, topics.numpy(), sampled=noise)
    assert good["information_code"] > 0.8 * (math.log(M) - good["label_entropy"])
    assert good["information_code_given_state"] > 0.8 and good["accuracy"]["code"] > 0.95
    assert abs(bad["information_code"]) < 0.05 and abs(bad["information_code_given_state"]) < 0.05
    # a mean that names the topic at 1e-3 under unit noise: the means overstate, the draws do not
    tiny = 1e-3 * named
    drawn = tiny + torch.randn(N, K, M, generator=g, dtype=torch.float64)
    weak = topic_information(states, tiny, topics.numpy(), sampled=drawn)
    assert weak["information_code_mean"] > 0.8 and abs(weak["information_code"]) < 0.05
