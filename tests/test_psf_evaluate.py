"""``forethought psf eval`` on tiny recipe runs: the planted corpus (the true generator judges: exact NLLs) with a
token flow and a second recipe run compared, a text corpus with a tiny judge and MAUVE, references spread over the
test split, n-gram repetition by hand, and bad inputs that fail in one line with nothing written."""

import json
import math
import shutil

import numpy as np
import pytest
import torch
from cli_harness import expect_clean_failure, snapshot
from test_planted import PLANTED_TINY as TINY_PLANTED
from transformers import PreTrainedTokenizerFast

from forethought import cli
from forethought.core.errors import ForethoughtError
from forethought.data.corpora import eval_windows, generated_corpus, spread_windows
from forethought.data.planted import build_generator, token_nll
from forethought.data.tokenizers import EOT, train_byte_level_bpe
from forethought.eval.diversity import ngram_repetition
from forethought.psf.evaluate import EvalConfig, evaluate
from forethought.psf.generate import load_recipe
from forethought.psf.scores import Scores, matched, metrics
from forethought.testing import finite_numbers, tiny_gpt2

PLANTED_TINY = [*TINY_PLANTED, "--data.planted.test_documents", "64"]  # + test documents to prompt from
QUICK = ["--samples", "8", "--references", "16", "--n_boot", "200", "--sweep", "[[1.0, 1.0], [0.7, 0.9]]",
         "--token_flow_sweep", "[1.0, 2.0]", "--densify", "false"]
OWN = ("psf", "psf_mean_trajectory", "ar")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A planted recipe run (base -> codes -> prior -> ar), a copy of it and a token flow on its AR table; a text
    recipe run (generated corpus, base -> prior -> ar) and a tiny judge (seconds)."""
    out = tmp_path_factory.mktemp("evalruns")
    mp = pytest.MonkeyPatch()
    mp.setenv("FORETHOUGHT_CACHE", str(out / "cache"))
    try:
        assert cli.main(["psf", "recipe", "--config", "tiny", "--run.out_dir", str(out), "--run.name", "pl",
                         "--landing.enabled", "false", "--self_realized.enabled", "false",
                         "--longer_blocks.blocks", "[]", "--prior.state_only_variant", "true", *PLANTED_TINY]) == 0
        assert cli.main(["psf", "recipe", "--config", "tiny", "--run.out_dir", str(out), "--run.name", "tx",
                         "--landing.enabled", "false", "--self_realized.enabled", "false", "--codes.enabled",
                         "false", "--longer_blocks.blocks", "[]"]) == 0
        shutil.copytree(out / "pl", out / "pl_copy")
        # the token-flow baseline through its CLI verb: the pl run's AR table and batches, a tiny flow
        assert cli.main(["psf", "token-flow", "--recipe_run", str(out / "pl"), "--name", "tf", "--size", "config",
                         "--token_flow.n_embd", "32", "--token_flow.n_layer", "1", "--token_flow.n_head", "2",
                         "--token_flow.time_dim", "8", "--token_flow.steps", "4", "--steps", "4",
                         "--device", "cpu"]) == 0
        backend = train_byte_level_bpe(generated_corpus(20_000, seed=1), 300)
        tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=EOT, bos_token=EOT, unk_token=EOT,
                                      pad_token=EOT)
        judge = tiny_gpt2(vocab_size=len(tok), hidden_size=32, layers=1, heads=2, eos_token_id=tok.eos_token_id)
        judge.save_pretrained(out / "judge")
        tok.save_pretrained(out / "judge")
    finally:
        mp.undo()
    return out


@pytest.fixture
def cache_env(runs, monkeypatch):
    monkeypatch.setenv("FORETHOUGHT_CACHE", str(runs / "cache"))
    return runs


def check_point(p, keys):
    for k in keys:
        lo, hi = p["interval"][k]
        assert math.isfinite(p[k]) and lo <= hi, (k, p[k], lo, hi)


def test_a_finished_token_flow_resumed_keeps_its_results_file(runs, tmp_path, monkeypatch):
    """Resuming a finished token flow trains nothing, so its results.json (whose bytes key psf eval's cache) stays
    as it was, also when the recipe run is named by another path to the same folder."""
    shutil.copytree(runs / "tf", tmp_path / "tf")
    before = (tmp_path / "tf" / "results.json").read_bytes()
    monkeypatch.chdir(runs)
    assert cli.main(["psf", "token-flow", "--recipe_run", "pl", "--out_dir", str(tmp_path), "--name", "tf",
                     "--size", "config", "--token_flow.n_embd", "32", "--token_flow.n_layer", "1",
                     "--token_flow.n_head", "2", "--token_flow.time_dim", "8", "--token_flow.steps", "4", "--steps",
                     "4", "--device", "cpu", "--resume", "auto"]) == 0
    assert (tmp_path / "tf" / "results.json").read_bytes() == before


def test_same_results_ignores_volatile_keys_and_path_spelling(tmp_path, monkeypatch):
    from forethought.core.io import same_results

    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").mkdir()
    a = {"run": str(tmp_path / "run"), "wall_s": 1.0, "loss": 2.0}
    assert same_results(a, {**a, "run": "run", "wall_s": 9.0}, volatile=("wall_s",), folders=("run",))
    assert not same_results(a, {**a, "run": "run", "loss": 2.5}, volatile=("wall_s",), folders=("run",))
    assert not same_results(a, {**a, "run": "elsewhere"}, volatile=("wall_s",), folders=("run",))
    assert not same_results(a, {**a, "wall_s": 9.0}) and not same_results(None, a)


def test_token_flow_verb_writes_a_run_on_the_recipe_batches(runs):
    res = json.loads((runs / "tf" / "results.json").read_text())
    assert res["recipe_run"] == str(runs / "pl") and res["steps"] == 4 and res["batch_size"] == 8
    assert res["training_tokens"] == 4 * 8 * 32 and res["config"]["n_layer"] == 1
    # ELF-B's recipe: contextual latents of the frozen AR, their scale measured; ELF's optimiser settings
    assert res["config"]["latents"] == "contextual" and res["config"]["latent_std"] > 0
    assert res["optimizer"]["lr"] == pytest.approx(1e-3 * 8 / 256) and res["optimizer"]["schedule"] == "constant"
    assert res["optimizer"]["beta2"] == 0.95 and res["optimizer"]["weight_decay"] == 0.0
    assert res["ratio"] == res["params"] / res["psf_encoder_decoder"]
    assert (runs / "tf" / "config.yaml").is_file() and (runs / "tf" / "step-000004").is_dir()
    # the judge-free look: decoder cross-entropy from clean latents below the noised ones' (more signal), both
    # finite; the samples' and the validation windows' token-id entropies within a window's possible range
    look = res["first_look"]
    assert res["config"]["latent_layer"] == -1 and "last hidden states" in res["latents"]
    assert look["windows"] > 0 and all(math.isfinite(v) and v > 0 for v in look["decoder_ce"].values())
    assert set(look["decoder_ce"]) == {"clean", "training_noise"}
    assert 0 <= look["sample_unigram_entropy"] <= math.log(32)  # a 4-step flow may write one token throughout
    assert 0 < look["valid_unigram_entropy"] <= math.log(32)
    # the one batch function of the recipe: planted windows start at document starts (multiples of L)
    from forethought.core.config import load_config
    from forethought.psf.recipe import RecipeConfig, recipe_batches

    recipe = load_config(RecipeConfig, runs / "pl" / "config.yaml", [])
    tokens = torch.arange(32 * 20)
    batch = recipe_batches(recipe, tokens, 8)(3)["tokens"]  # (8, 32)
    assert batch.shape == (8, 32) and bool((batch[:, 0] % 32 == 0).all())
    assert torch.equal(batch, recipe_batches(recipe, tokens, 8)(3)["tokens"])  # a pure function of the step


def _tiny_t5_encoder(folder, vocab: int):
    from transformers import T5Config, T5EncoderModel

    torch.manual_seed(0)
    T5EncoderModel(T5Config(vocab_size=vocab, d_model=16, d_kv=4, num_heads=4, num_layers=2, d_ff=32)
                   ).save_pretrained(folder)
    return str(folder)


def test_token_flow_on_a_hugging_face_encoders_latents(runs, tmp_path):
    """ELF-B's latents: a frozen Hugging Face encoder (here a tiny T5) reads the whole window, so a position's
    latent changes with a later token; the flow models its width; an encoder that cannot read the recipe's ids, or
    lacks the layer asked for, is refused before any model loads."""
    from forethought.psf.token_flow import encoder_latents, load_token_flow
    from forethought.psf.token_flow_run import load_latent_encoder

    vocab = json.loads((runs / "pl" / "results.json").read_text())["vocab_size"]
    t5 = _tiny_t5_encoder(tmp_path / "t5", vocab + 3)
    enc = load_latent_encoder(t5)
    ids = torch.randint(0, vocab, (2, 32))
    later = ids.clone()
    later[:, -1] = (later[:, -1] + 1) % vocab
    h = encoder_latents(enc, ids)
    assert h.shape == (2, 32, 16) and not torch.allclose(h[:, 0], encoder_latents(enc, later)[:, 0])
    assert torch.equal(encoder_latents(enc, ids, 0)[:, 0], encoder_latents(enc, later, 0)[:, 0])  # embeddings
    assert cli.main(["psf", "token-flow", "--recipe_run", str(runs / "pl"), "--out_dir", str(tmp_path), "--name",
                     "tf_t5", "--size", "config", "--token_flow.n_embd", "32", "--token_flow.n_layer", "1",
                     "--token_flow.n_head", "2", "--token_flow.time_dim", "8", "--token_flow.steps", "4",
                     "--steps", "2", "--token_flow.latent_encoder", t5, "--device", "cpu"]) == 0
    res = json.loads((tmp_path / "tf_t5" / "results.json").read_text())
    assert res["config"]["latent_encoder"] == t5 and "whole window" in res["latents"] and t5 in res["latents"]
    assert res["config"]["latent_std"] > 0 and math.isfinite(res["first_look"]["decoder_ce"]["clean"])
    model, _ = load_token_flow(tmp_path / "tf_t5")
    assert model.table.shape == (vocab, 16)  # the recipe's ids, the encoder's width
    small = _tiny_t5_encoder(tmp_path / "t5_small_vocab", vocab - 1)
    for args, names in ((["--token_flow.latent_encoder", small], ["reads", "fewer than the recipe tokenizer's"]),
                        (["--token_flow.latent_encoder", t5, "--token_flow.latent_layer", "3"],
                         ["latent_layer must be -1 or 0..2"]),
                        (["--token_flow.latent_encoder", str(tmp_path / "nothing")], ["cannot be loaded"])):
        expect_clean_failure(["psf", "token-flow", "--recipe_run", str(runs / "pl"), "--out_dir",
                              str(tmp_path / "bad"), *args, "--device", "cpu"], tmp_path, runs / "pl", names)
        assert not (tmp_path / "bad").exists()


def test_eval_planted_with_compared_runs(cache_env, capsys):
    runs = cache_env
    run = runs / "pl"
    before = snapshot(run)
    assert cli.main(["psf", "eval", "--recipe_run", str(run), "--compare", f"[{runs / 'tf'}, {runs / 'pl_copy'}]",
                     *QUICK]) == 0
    printed = capsys.readouterr().out
    assert "| psf |" in printed and "differences" in printed and "floor" in printed
    after = snapshot(run)
    assert all(after[k] == v for k, v in before.items())  # nothing of the run changed
    assert all(k.startswith("eval/") for k in set(after) - set(before))
    res = json.loads((run / "eval" / "results.json").read_text())
    assert (run / "eval" / "curves.png").is_file()
    assert finite_numbers(res) > 100
    # the state-only variant too, the compared run's as well
    assert set(res["models"]) == {*OWN, "psf_state_only", "tf", "pl_copy", "pl_copy_state_only"}
    assert res["models"]["psf_state_only"]["codes"] == "zero (state-only prior)"
    assert res["models"]["pl_copy_state_only"]["codes"] == "zero (state-only prior)"
    assert "psf - pl_copy_state_only" in res["differences"]
    assert res["models"]["psf"]["codes"] == "sampled with the states"
    assert res["judge"].startswith("true generator") and res["judge_max_tokens"] is None
    keys = ("gen_ppl", "nll_per_token", "entropy", "repetition_2", "repetition_3", "repetition_4", "persistence",
            "block_coherence")
    for name, row in res["models"].items():
        assert len(row["sweep"]) == 2, name
        for p in row["sweep"]:
            check_point(p, keys)
            assert "mauve" not in p  # no MAUVE on the planted corpus
        assert row["flops_per_sample"] > 0 and row["samples_per_s_b32"] > 0
    assert [p["guidance"] for p in res["models"]["tf"]["sweep"]] == [1.0, 2.0]  # ELF's knob, the default
    assert res["models"]["psf"]["serial_depth"] == 8 + 8 and res["models"]["ar"]["serial_depth"] == 32
    assert res["models"]["tf"]["serial_depth"] == 4 + 1 and res["models"]["psf_mean_trajectory"]["serial_depth"] == 8
    # the floor and the references: test documents evenly spaced from the first to the last
    refs = res["references"]
    assert refs["split"] == "test" and refs["n"] == 16 and refs["split_tokens"] == 64 * 32
    assert refs["offsets"][0] == 0 and refs["last_end"] == refs["split_tokens"]
    assert res["floor"]["entropy_rate"] > 0 and res["target_entropy"] == pytest.approx(refs["entropy"])
    # exact NLLs: the row's NLL per token is the true generator's token_nll of the same (cached) samples
    gen = build_generator(load_recipe(run).cfg.data.planted)
    cached = sorted((run / "eval" / "cache").glob("psf-p1-*.json"))
    assert len(cached) == 1
    ids = np.array(json.loads(cached[0].read_text())["ids"])
    assert ids.shape == (8, 32)
    assert res["models"]["psf"]["sweep"][1]["nll_per_token"] == pytest.approx(float(token_nll(gen, ids).mean()),
                                                                               rel=1e-12)
    assert res["models"]["psf"]["sweep"][1]["gen_ppl"] == pytest.approx(math.exp(token_nll(gen, ids).mean()))
    # differences: an identical copy of the run samples exactly the same documents; the token flow shares no point
    same = res["differences"]["psf - pl_copy"]
    assert same["points_shared"] == 2
    for p in same["per_point"]:
        assert all(v == 0 for v in p["diff"].values())
        assert all(lo <= 0 <= hi for lo, hi in p["interval"].values())
    assert res["differences"]["psf - tf"]["points_shared"] == 0
    for name, d in res["differences"].items():  # the NLL difference at matched entropy is log of the PPL ratio
        m, other = d["matched_entropy"], res["models"][name.removeprefix("psf - ")]["gen_ppl_at_matched_entropy"]
        if m["gen_ppl_diff"] is None:
            assert m["nll_per_token_diff"] is None and m["nll_per_token_interval"] is None
        else:
            mine = res["models"]["psf"]["gen_ppl_at_matched_entropy"]
            assert m["nll_per_token_diff"] == pytest.approx(math.log(mine) - math.log(other))
            lo, hi = m["nll_per_token_interval"]
            assert lo <= hi and (m["gen_ppl_diff"] != 0 or lo <= 0 <= hi)
    assert set(res["differences"]) == {f"psf - {m}" for m in res["models"] if m != "psf"}
    assert res["bootstrap"]["differences"].startswith("unpaired")


def test_eval_text_with_judge_mauve_and_the_cache(cache_env, capsys):
    runs = cache_env
    run, out = runs / "tx", runs / "tx_eval"
    opts = ["--recipe_run", str(run), "--judge", str(runs / "judge"), "--samples", "6", "--references", "8",
            "--n_boot", "100", "--mauve_boot", "3", "--sweep", "[[1.0, 1.0], [0.5, 0.9]]", "--cost", "false",
            "--densify", "false",
            "--out", str(out)]
    assert cli.main(["psf", "eval", *opts, "--models", "[psf]", "--prepare_only", "true"]) == 0
    assert not (out / "results.json").exists()
    cached = sorted(p.name.split("-")[0] + ("-judge" if "judge" in p.name else "") for p in (out / "cache").iterdir())
    assert cached == ["psf", "psf", "psf-judge", "psf-judge", "references-judge"]  # 2 sample sets, 3 judge passes
    assert "psf eval: judged psf-p1 (" in capsys.readouterr().err  # progress, one line per set and pass
    assert cli.main(["psf", "eval", *opts]) == 0
    res = json.loads((out / "results.json").read_text())
    assert {"psf-p0 samples", "psf-p1 judge", "references judge"} <= set(res["cache_hits"])
    assert "psf eval: sampled psf-p0 (cached)" in capsys.readouterr().err
    assert not any(h.startswith("ar") for h in res["cache_hits"])
    assert set(res["models"]) == set(OWN) and res["judge_max_tokens"] > 0
    for row in res["models"].values():
        for p in row["sweep"]:
            check_point(p, ("gen_ppl", "entropy", "repetition_2", "repetition_3", "repetition_4", "mauve"))
            assert 0 < p["mauve"] <= 1 and p["judge_tokens"] > 0
        m = row["matched_entropy"]
        assert (m["gen_ppl"] is None) == (m["interval"] is None) and 0 <= m["bracketed_fraction"] <= 1
        assert "flops_per_sample" not in row
    assert finite_numbers(res) > 50
    # references: windows of the test split, evenly spaced from its start to its end
    refs = res["references"]
    windows = refs["split_tokens"] // 32
    assert windows > 8 and refs["offsets"][0] == 0 and refs["offsets"][-1] == (windows - 1) * 32
    assert refs["offsets"] == sorted(set(refs["offsets"]))
    gaps = np.diff(refs["offsets"])
    assert gaps.max() - gaps.min() <= 32  # evenly spaced, to the window
    # ELF's scoring (first tokens unscored) at a fixed target entropy: the same sample sets from the cache, judge
    # passes of their own, one token fewer scored per text, the target the one given
    target = round(res["target_entropy"] - 0.1, 3)
    again = ["--out", str(runs / "tx_eval_elf"), "--cache_dir", str(out / "cache"), "--judge_first_token", "false",
             "--target_entropy", str(target)]
    assert cli.main(["psf", "eval", *opts[:-2], *again]) == 0
    elf = json.loads((runs / "tx_eval_elf" / "results.json").read_text())
    assert "psf-p0 samples" in elf["cache_hits"] and "references judge" not in elf["cache_hits"]
    assert elf["judge_max_tokens"] == res["judge_max_tokens"]
    assert elf["references"]["judge_tokens"] == res["references"]["judge_tokens"] - 8  # 8 references
    assert elf["target_entropy"] == target and elf["target_entropy_source"] == "fixed"
    assert elf["target_entropy_interval"] == [target, target] and res["target_entropy_source"] == "references"


def test_a_plotting_error_keeps_the_evaluation(cache_env, capsys, monkeypatch):
    """Issue 31: results.json is written before the plot; a plot that fails is reported, the results stay."""
    import forethought.psf.evaluate as evaluate_module

    def broken(*args, **kwargs):
        raise RuntimeError("no backend\nsecond line")

    monkeypatch.setattr(evaluate_module, "plot_sweeps", broken)
    runs = cache_env
    out = runs / "tx_eval_noplot"
    assert cli.main(["psf", "eval", "--recipe_run", str(runs / "tx"), "--judge", str(runs / "judge"), "--samples",
                     "4", "--references", "8", "--n_boot", "100", "--mauve", "false", "--sweep", "[[1.0, 1.0]]",
                     "--cost", "false", "--models", "[psf]", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "the plot was not drawn (RuntimeError: no backend)" in err
    res = json.loads((out / "results.json").read_text())
    assert res["curves_png"] is None and res["plot_error"] == "RuntimeError: no backend"
    assert set(res["models"]) == {"psf"} and not (out / "curves.png").exists()


def test_spread_windows_cover_the_split():
    tokens = np.arange(1000)
    w, off = spread_windows(tokens, 5, 10)  # 100 windows: 0, 25, 50, 74, 99 (rounded linspace)
    assert off[0] == 0 and off[-1] == 990 and len(set(off.tolist())) == 5
    assert torch.equal(w[:, 0], torch.from_numpy(off)) and w.shape == (5, 10)
    r1, o1 = spread_windows(tokens, 7, 10, "random", seed=3)
    r2, o2 = spread_windows(tokens, 7, 10, "random", seed=3)
    assert np.array_equal(o1, o2) and np.all(np.diff(o1) >= 10) and np.all(o1 % 10 == 0)
    first, _ = spread_windows(tokens, 4, 10, "first")
    assert torch.equal(first, eval_windows(tokens, 4, 10))
    assert spread_windows(tokens, 100, 10)[1].tolist() == list(range(0, 1000, 10))  # all of them
    with pytest.raises(ForethoughtError):
        spread_windows(tokens, 101, 10)


def test_ngram_repetition_by_hand():
    rows = [[1, 2, 1, 2, 1], [7, 7, 7, 7], [1, 2, 3, 4, 5], [4, 2]]
    # [1,2,1,2,1]: 2-grams 12 21 12 21 -> 2 of 4 repeat; 3-grams 121 212 121 -> 1 of 3; 4-grams 1212 2121 -> 0
    assert ngram_repetition(rows, 2)[:3].tolist() == pytest.approx([0.5, 2 / 3, 0.0])
    assert ngram_repetition(rows, 3)[:2].tolist() == pytest.approx([1 / 3, 1 / 2])
    rep4 = ngram_repetition(rows, 4)
    assert rep4[:3].tolist() == pytest.approx([0.0, 0.0, 0.0]) and np.isnan(rep4[3])  # too short for a 4-gram
    # the metric is the mean over samples that have n-grams, and a bootstrap resample reuses the same formula
    s = Scores(nll=np.array([2.0, 4.0, 6.0, 1.0]), tokens=np.array([2, 2, 2, 1]), entropy=np.zeros(4),
               repetition={4: rep4}, extra={}, features=None)
    m = metrics(s)
    assert m["repetition_4"] == 0.0 and m["nll_per_token"] == pytest.approx(13 / 7)
    assert m["gen_ppl"] == pytest.approx(math.exp(13 / 7))
    boot = metrics(s, np.array([[0, 0, 0, 0], [3, 3, 3, 3], [1, 2, 3, 0]]))
    assert boot["nll_per_token"].tolist() == pytest.approx([1.0, 1.0, 13 / 7])
    assert boot["repetition_4"][0] == 0.0 and np.isnan(boot["repetition_4"][1])


def test_prompted_continuations_in_psf_eval(cache_env, tmp_path, capsys):
    """--prompted_blocks: every PSF model continues planted test prompts; exact scores with intervals, paired
    differences against the first model, the true continuations beside them."""
    runs = cache_env
    out = tmp_path / "ev"
    assert cli.main(["psf", "eval", "--recipe_run", str(runs / "pl"), "--models", "[psf, psf_mean_trajectory]",
                     "--compare", f"[{runs / 'pl_copy'}]", "--out", str(out), "--cost", "false",
                     "--prompted_blocks", "[1, 3]", "--prompts", "12", *QUICK]) == 0
    assert "prompted continuations" in capsys.readouterr().out
    pr = json.loads((out / "results.json").read_text())["prompted"]
    assert pr["prompts"] == 12 and pr["prompt_blocks"] == [1, 3] and 0 < pr["chance_stay"] < 1
    for m in ("1", "3"):
        row = pr["results"][m]
        # the mean trajectory cannot be prompted; the copy of the run is a second PSF model (two: its state-only
        # prior too)
        assert set(row) == {"true", "psf", "pl_copy", "pl_copy_state_only", "differences"}
        assert set(row["differences"]) == {"pl_copy - psf", "pl_copy_state_only - psf", "true - psf"}
        for name in ("true", "psf", "pl_copy", "pl_copy_state_only"):
            e = row[name]["continuation_nll"]
            assert e["mean"] > 0 and e["interval"][0] <= e["mean"] <= e["interval"][1]
            assert 0 <= row[name]["junction_stay"]["mean"] <= 1
        # m = 3 of K = 4 leaves one continued block: no pair to keep its topic
        assert (row["psf"]["continuation_persistence"]["mean"] is None) == (m == "3")
    # the same model sampled with the same seed: identical continuations, a zero difference
    d = pr["results"]["1"]["differences"]["pl_copy - psf"]["continuation_nll"]
    assert d["diff"] == 0.0


def test_bad_inputs_fail_cleanly(cache_env, tmp_path):
    """Through the console script: one line, exit 2, the run folder untouched (the fork server's start, shared
    with the other bad-input tests, is most of this test's time)."""
    runs = cache_env
    run = runs / "pl"
    base = ["psf", "eval", "--recipe_run", str(run)]
    expect_clean_failure(["psf", "eval"], tmp_path, run, ["recipe_run"])
    expect_clean_failure([*base, "--models", "[psf, gpt]"], tmp_path, run, ["models", "gpt"])
    expect_clean_failure([*base, "--compare", f"[{runs / 'tx'}]"], tmp_path, run, ["compare", "other data"])
    expect_clean_failure(["psf", "eval", "--recipe_run", str(runs / "tx"), "--references", "8", "--judge",
                          str(tmp_path / "nojudge")], tmp_path, runs / "tx", ["nojudge"])


def test_more_bad_inputs_raise_before_writing(cache_env, tmp_path):
    runs = cache_env
    run = runs / "pl"
    before = snapshot(runs)
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "pl_copy_state_only").symlink_to(runs / "tf", target_is_directory=True)  # pl_copy's derived name
    bad = [({"samples": 1}, "samples"), ({"sweep": [[1.0, 0.0]]}, "top_p"), ({"sweep": [[1.0]]}, "sweep"),
           ({"token_flow_sweep": [0.0]}, "guidance must be a number > 0"),
           ({"mauve_boot": 300, "n_boot": 200}, "mauve_boot"),
           ({"compare": [str(runs / "missing")]}, "missing"), ({"compare": [str(runs / "cache")]}, "neither"),
           ({"compare": [str(runs / "tf"), str(runs / "tf")]}, "names another model"),
           ({"compare": [str(runs / "pl_copy"), str(tmp_path / "pl_copy_state_only")]}, "names another model"),
           ({"references": 100}, "64 documents"), ({"out": str(tmp_path / "a_file")}, "a file"),
           ({"out": str(run / "base")}, "stage 'base'"), ({"recipe_run": str(tmp_path)}, "not a finished"),
           ({"prompted_blocks": [4], "references": 8}, "every m must be in 1..3"),
           ({"prompted_blocks": [1], "prompts": 1}, "prompts"),
           ({"prompted_blocks": [1], "prompts": 1000, "references": 8}, "holds 64 documents"),
           ({"prompted_blocks": [1, 1]}, "twice"),
           ({"recipe_run": str(runs / "tx"), "prompted_blocks": [1], "references": 8}, "planted corpus")]
    for kw, message in bad:
        cfg = EvalConfig(**{"recipe_run": str(run), "cost": False, **kw})
        with pytest.raises(ForethoughtError, match=message):
            evaluate(cfg)
    assert snapshot(runs) == before


def test_densified_sweeps_reach_the_target_entropy(cache_env, tmp_path, capsys):
    run = cache_env / "pl"
    assert cli.main(["psf", "eval", "--recipe_run", str(run), "--models", "[psf, ar]", "--samples", "8",
                     "--references", "16", "--n_boot", "100", "--sweep", "[[1.0, 1.0], [0.7, 0.9]]", "--cost",
                     "false", "--densify_points", "6", "--out", str(tmp_path / "ev")]) == 0
    res = json.loads((tmp_path / "ev" / "results.json").read_text())
    target = res["target_entropy"]
    for name, row in res["models"].items():
        d, sweep = row["densify"], row["sweep"]
        gaps = [abs(p["entropy"] - target) for p in sweep if p["top_p"] == 1.0]  # the knob line's points
        assert d["nearest_entropy_gap"] == pytest.approx(min(gaps)) == row["matched_entropy"]["nearest_entropy_gap"]
        assert d["added"] == sum(p["densified"] for p in sweep) and not any(p["densified"] for p in sweep[:2])
        assert d["within_tolerance"] == (min(gaps) <= 0.05)
        assert d["within_tolerance"] or d["added"] == 6, name  # the budget is the only other way out
        assert all(p["top_p"] == 1.0 for p in sweep if p["densified"])  # top-p fixed while bisecting
        m = row["matched_entropy"]
        # matched entropy is read on the knob line only (temperature at top-p 1): the (0.7, 0.9) point is off it
        line = [(p["entropy"], p["gen_ppl"]) for p in sweep if p["top_p"] == 1.0]
        assert m["curve_points"] == len(line) == len(sweep) - 1
        assert m["nearest_entropy_gap"] == pytest.approx(min(abs(e - target) for e, _ in line))
        assert m["gen_ppl"] == pytest.approx(matched(line, target)) if m["gen_ppl"] is not None else (
            not math.isfinite(matched(line, target)))
        if m["gen_ppl"] is not None:  # the interpolation error widens the sampling interval
            lo, hi = m["interval_sampling_only"]
            assert m["interval"][0] <= lo <= hi <= m["interval"][1]
            assert m["valid"] == (m["nll_per_token"] >= res["floor"]["entropy_rate"])
    t1 = res["differences"]["psf - ar"]["at_temperature_1"]
    assert set(t1) >= {"nll_per_token", "persistence"}
    printed = capsys.readouterr().out
    assert "temperature 1: nll_per_token" in printed and "densified sweeps: psf +" in printed
