"""The PSF benchmark specs (psf_wikitext, psf_wikitext_codes, psf_planted, psf_planted_tiny, psf_paper) and their
arithmetic (forethought.experiments.psf_bench), which replaced benchmarks/psf_wikitext.py and psf_planted.py: the
specs' pipelines are laid out as the scripts' (every file derive reads is archived), and the moved functions give
the committed results files' numbers from those files' own inputs, and the verdicts their numbers give."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from forethought.experiments import psf_bench as b
from forethought.experiments.spec import load_spec, plan
from forethought.report.psf import evaluation

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SPECS = ("psf_wikitext", "psf_wikitext_codes", "psf_planted", "psf_planted_tiny", "psf_paper")


def _opt(argv: tuple[str, ...], key: str) -> str:
    return argv[argv.index(key) + 1]


@pytest.mark.parametrize("name", SPECS)
def test_pipeline_layout(name: str) -> None:
    """(Every command of every shipped spec parses: tests/test_experiment_runner.py.) Here: each run is one seed's
    pipeline in its own folder; psf eval compares the runs inside it (named by their folders, as the script's
    rows), after they were trained; every archived file is written by one of the run's steps."""
    spec, _ = load_spec(name)
    for p in plan(spec, Path("/out")):
        run_dir = f"/out/{p.run}"
        recipe = p.steps[0]
        assert recipe[:2] == ("psf", "recipe") and _opt(recipe, "--run.name") == p.run
        assert _opt(recipe, "--run.seed") == str(p.seed)
        evaluation = p.steps[-1]
        assert evaluation[:2] == ("psf", "eval") and _opt(evaluation, "--recipe_run") == run_dir
        assert _opt(evaluation, "--out") == f"{run_dir}/eval"
        written = {"results.json", "eval/results.json"}
        for _k, argv in enumerate(p.steps[1:-1], 1):
            if argv[:2] == ("psf", "recipe"):
                written.add(f"{_opt(argv, '--run.name')}/results.json")
                assert _opt(argv, "--run.out_dir") == run_dir
            elif argv[:2] == ("psf", "token-flow"):
                written.add(f"{_opt(argv, '--name')}/results.json")
            elif argv[:2] == ("psf", "diagnose"):
                sub = _opt(argv, "--recipe_run").removeprefix(run_dir).strip("/")
                written.add(f"{sub}/diagnose.json" if sub else "diagnose.json")
        assert set(spec.files) <= written, set(spec.files) - written
        if "--compare" in evaluation:
            compared = _opt(evaluation, "--compare").strip("[]").split(",")
            assert all(c.startswith(run_dir + "/") and f"{c.removeprefix(run_dir + '/')}/results.json" in written
                       for c in compared)
            assert {"psf_content", "token_flow"} <= {c.rsplit("/", 1)[1] for c in compared}


def _wikitext_eval(r: dict) -> dict:
    """The psf eval results.json a psf_wikitext file was made from (its rows, differences and what the script copied
    into its settings)."""
    s = r["settings"]
    refs = {"n": s["references"], "split": s["reference_split"], "spread": s["reference_spread"],
            "first_offset": s["reference_offsets"]["first"], "last_end": s["reference_offsets"]["last_end"],
            "split_tokens": s["reference_offsets"]["split_tokens"], "judge_tokens": s["reference_judge_tokens"],
            "gen_ppl": s["reference_gen_ppl"]}
    cfg = {"samples": s["samples_per_point"], "sweep": [[p["temperature"], p["top_p"]] for p in s["sweep"]],
           "token_flow_knob": s["token_flow_sweep"]["knob"], "token_flow_sweep": s["token_flow_sweep"]["values"],
           "judge": s["judge"], "length_quantile": s["length_quantile"], "seed": s["seed"],
           **{k: s[k] for k in ("entropy_tolerance", "densify_top_p") if k in s}}
    return {"models": {**{n: r[n] for n in b.ROWS}, **r.get("other_rows", {})}, "seq_len": s["seq_len"],
            "differences": r["differences"], "target_entropy": s["target_entropy"],
            "target_entropy_interval": s["target_entropy_interval"], "corpus": s["corpus"],
            "tokenizer": s["tokenizer"], "blocks": s["blocks"], "judge_max_tokens": s["judge_max_tokens"],
            "references": refs, "settings": cfg, "bootstrap": s["bootstrap"], "conventions": s["conventions"]}


def _collected_codes(tmp_path: Path) -> dict:
    """psf_wikitext_codes collected by the runner from one archived record rebuilt from the committed file's own
    inputs (its psf eval results and psf diagnose of each recipe)."""
    from forethought.experiments.runner import Layout, collect

    r = evaluation(json.loads((RESULTS / "psf_wikitext_codes.json").read_text()))
    spec, path = load_spec("psf_wikitext_codes")
    layout = Layout.under(tmp_path, spec.name)
    layout.archive.mkdir(parents=True)
    d = r["diagnose"]
    record = {"command": "x", "started": 0.0, "finished": 1.0, "results": {}, "eval/results": _wikitext_eval(r),
              "diagnose": d["psf"], "psf_content/diagnose": d["psf_content"],
              "psf_codes1000/diagnose": d["psf_codes1000"]}
    (layout.archive / "wikitext_codes-s0.json").write_text(json.dumps(record))
    return collect(spec, layout, "test", spec_file=path)


def test_collected_codes_file_reads_as_the_scripts(tmp_path: Path) -> None:
    """Once the runner has collected psf_wikitext_codes, its derive holds the run's evaluation in the script's
    layout, so README's headline, docs/psf.md's lead and the results section's table and reading say what they
    said from the script's file; its curves are drawn beside it; the generic derived tables leave it out."""
    from forethought.report import psf
    from forethought.report.pages import PSF

    legacy = psf.evaluation(json.loads((RESULTS / "psf_wikitext_codes.json").read_text()))
    out = _collected_codes(tmp_path)
    view = out["derived"]["wikitext_codes-s0"]["evaluation"]
    for k in ("psf", "psf_content", "ar", "token_flow", "other_rows", "differences", "checks"):
        assert json.loads(json.dumps(view[k])) == legacy[k], k
    assert view["diagnose"] == legacy["diagnose"]
    for k in ("corpus", "seq_len", "blocks", "samples_per_point", "judge", "judge_max_tokens", "target_entropy",
              "reference_gen_ppl", "sweep", "references"):
        assert view["settings"][k] == legacy["settings"][k], k
    assert psf.headline(out) == psf.headline(legacy)
    assert psf.wikitext_codes_lead(out) == psf.wikitext_codes_lead(legacy)
    assert (tmp_path / "benchmarks" / "results" / "psf_wikitext_codes_curves.png").stat().st_size > 0
    section = next(s for s in PSF.sections if s.json == "psf_wikitext_codes.json")
    body = "\n".join(section.render(out))
    assert "\n".join(psf.wikitext(legacy)[:8]) in body and "*wikitext_codes-s0*" in body
    assert "evaluation" not in body.split("Derived (")[1]
    assert section.notes(out) == psf.wikitext_codes_reading(legacy)


@pytest.mark.parametrize("file", ["psf_wikitext.json", "psf_wikitext_codes.json"])
def test_wikitext_checks_equal_the_scripts(file: str) -> None:
    r = evaluation(json.loads((RESULTS / file).read_text()))
    ev = _wikitext_eval(r)
    assert json.loads(json.dumps(b.wikitext_checks(ev))) == r["checks"]
    # derive: one entry per run, the checks and what the codes carry (psf diagnose's zeroing cost)
    record = {"eval/results": ev, "diagnose": r["diagnose"]["psf"],
              "psf_content/diagnose": r["diagnose"]["psf_content"]}
    d = b.wikitext({"wikitext-s0": record}, {})["wikitext-s0"]
    assert d["checks"] == b.wikitext_checks(ev) and d["target_entropy"] == r["settings"]["target_entropy"]
    assert d["gen_ppl_at_matched_entropy"]["psf"] == r["psf"]["gen_ppl_at_matched_entropy"]
    codes = r["diagnose"]["psf"].get("codes")
    assert ("psf" in d["zeroing_cost"]) == bool(codes and "zeroing_cost" in codes)


def test_wikitext_verdicts_follow_their_numbers() -> None:
    ev = _wikitext_eval(json.loads((RESULTS / "psf_wikitext.json").read_text()))
    ev = copy.deepcopy(ev)
    rows = ev["models"]
    rows["token_flow"]["flops_per_sample"] = rows["psf"]["flops_per_sample"] * 5  # PSF at a fifth: not a tenth
    rows["psf"]["gen_ppl_at_matched_entropy"] = rows["psf_content"]["gen_ppl_at_matched_entropy"] - 1
    rows["ar"]["params_ratio_to_psf_encoder_decoder"] = 1.25
    rows["psf"]["serial_depth"] += 1
    c = b.wikitext_checks(ev)
    assert c["psf_flops_le_tenth_of_token_flow"]["pass"] is False
    assert c["psf_flops_le_tenth_of_token_flow"]["ratio"] == pytest.approx(0.2)
    assert c["psf_beats_content_at_matched_entropy"]["pass"] is True
    assert c["baseline_params_within_20pct_of_psf_encoder_decoder"]["pass"] is False
    assert c["psf_serial_depth_eq_prior_steps_plus_L_over_K"]["pass"] is False
    rows["psf_content"]["gen_ppl_at_matched_entropy"] = None  # a sweep that does not bracket the target
    c = b.wikitext_checks(ev)["psf_beats_content_at_matched_entropy"]
    assert c["pass"] is None and "bracket" in c["note"]


def _planted() -> tuple[dict, dict[int, dict]]:
    p = json.loads((RESULTS / "psf_planted.json").read_text())
    return p, {int(s): v for s, v in p["per_seed"].items()}


def test_planted_aggregation_equals_the_scripts() -> None:
    """over_seeds and the four checks from the file's per-seed summaries give the file's own numbers."""
    p, per_seed = _planted()
    agg = b.over_seeds(per_seed)
    assert json.loads(json.dumps(agg)) == p["over_seeds"]
    assert json.loads(json.dumps(b.planted_checks(per_seed, agg))) == p["checks"]


def test_planted_checks_follow_their_numbers() -> None:
    _, per_seed = _planted()
    per_seed = copy.deepcopy(per_seed)
    per_seed[1]["shuffle"]["psf"]["intervals"]["first"][0] = 0.05  # one seed's interval reaches below 0.1
    for s in per_seed:  # the token flow 5x PSF's FLOPs: more than a tenth
        per_seed[s]["models"]["token_flow"]["flops_per_sample"] = 5 * per_seed[s]["models"]["psf"]["flops_per_sample"]
    c = b.planted_checks(per_seed, b.over_seeds(per_seed))
    assert c["shuffle_cost_first_ge_0.1"]["pass"] is False
    assert c["psf_below_token_flow_at_tenth_flops"]["flops_at_most_a_tenth"] is False
    assert c["psf_below_token_flow_at_tenth_flops"]["pass"] is not True
    assert c["psf_below_token_flow_at_tenth_flops"]["flops_ratio"] == pytest.approx([0.2] * len(per_seed))


def test_interpolation_and_gain_by_hand() -> None:
    sweep = [{"entropy": 2.0, "persistence": 0.5}, {"entropy": 3.0, "persistence": 0.9},
             {"entropy": 1.0, "persistence": 0.1}]
    assert b.interpolate(sweep, "persistence", 2.25) == pytest.approx(0.6)
    assert b.interpolate(sweep, "persistence", 1.5) == pytest.approx(0.3)
    assert b.interpolate(sweep, "persistence", 3.5) is None  # not bracketed

    # two seeds, both sweeps bracketing the target: psf 0.09 and 0.11 above the floor (2), content 0.10 and 0.10
    def seed(ep: float, ec: float) -> dict:
        m = {"nll_at_matched_entropy": None, "excess_over_floor": None, "persistence_at_matched_entropy": None,
             "persistence_near": 0.5, "flops_per_sample": 1.0, "serial_depth": 1}
        diff = {"nll_at_matched_entropy": ep - ec, "nll_at_other_entropy": None}
        return {"floor": 2.0, "psf_minus": {"psf_content": diff},
                "models": {"psf": {**m, "excess_over_floor": ep, "nll_at_matched_entropy": 2 + ep},
                           "psf_content": {**m, "excess_over_floor": ec, "nll_at_matched_entropy": 2 + ec}},
                "shuffle": {}}
    agg = b.over_seeds({0: seed(0.09, 0.10), 1: seed(0.11, 0.10)})
    c = agg["nll_comparisons"]["psf_content"]
    assert c["basis"] == "the references' entropy" and c["per_seed"] == pytest.approx([-0.01, 0.01])
    assert c["gain"] == pytest.approx([0.1, -0.1]) and c["gain_mean"] == pytest.approx(0.0)
    assert c["interval"][0] < 0 < c["interval"][1]
    d = agg["differences"]["psf - psf_content"]["nll_at_matched_entropy"]
    assert d["diffs"] == pytest.approx([-0.01, 0.01])
    assert agg["differences"]["psf - psf_content"]["persistence_at_matched_entropy"] is None
    # content never reaches the target: psf is compared at content's own entropy (psf below the floor: gain > 1)
    seeds = {i: seed(0.0, 1.0) for i in range(3)}
    for sd, at in zip(seeds.values(), (-1.1, -1.3, -1.2), strict=True):
        sd["psf_minus"]["psf_content"] = {"nll_at_matched_entropy": None, "nll_at_other_entropy": at,
                                          "other_nll_there": 3.0}
    c = b.over_seeds(seeds)["nll_comparisons"]["psf_content"]
    assert c["basis"].startswith("psf_content's own entropy") and c["gain"] == pytest.approx([1.1, 1.3, 1.2])
    # mean -1.2, std 0.1: t_{0.975, 2} = 4.303 -> -1.2 ± 4.303 * 0.1 / sqrt(3)
    assert c["interval"] == pytest.approx([-1.2 - 0.24843, -1.2 + 0.24843], abs=1e-4)
    # at_other_entropy: psf interpolated log-linearly at the other's point nearest the target
    psf = [{"entropy": 3.0, "gen_ppl": math.exp(2.0)}, {"entropy": 4.0, "gen_ppl": math.exp(3.0)}]
    other = [{"entropy": 3.5, "gen_ppl": math.exp(4.0), "nll_per_token": 4.0},
             {"entropy": 5.0, "gen_ppl": math.exp(5.0), "nll_per_token": 5.0}]
    r = b.at_other_entropy(psf, other, target=3.2)
    assert r["other_entropy"] == 3.5 and r["nll_at_other_entropy"] == pytest.approx(2.5 - 4.0)
    assert b.at_other_entropy(psf, other[1:], target=3.2)["nll_at_other_entropy"] is None


def test_planted_derive_reads_each_runs_files_by_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """derive: each run's eval results and both diagnoses go to seed_summary under the run's seed; the checks
    and their dot-free verdicts (what the spec's checks read) come from the seeds together, none with one seed."""
    p, per_seed = _planted()
    seen = {}

    def fake(ev: dict, diags: dict) -> dict:
        seen[ev["seed"]] = sorted(diags)
        return per_seed[ev["seed"]]

    monkeypatch.setattr(b, "seed_summary", fake)
    records = {f"planted-s{s}": {"eval/results": {"seed": s}, "diagnose": {}, "psf_content/diagnose": {}}
               for s in (2, 0, 1)}
    collected = {"runs": {f"planted-s{s}": {"seed": s} for s in (0, 1, 2)}}
    d = b.planted(records, collected)
    assert seen == {s: ["psf", "psf_content"] for s in (0, 1, 2)} and d["seeds"] == [0, 1, 2]
    assert d["floor"] == p["floor"] and json.loads(json.dumps(d["checks"])) == p["checks"]
    assert d["verdicts"] == {k.replace(".", "_"): v["pass"] for k, v in p["checks"].items()}
    assert d["models"]["psf"]["nll_at_matched_entropy"] == p["over_seeds"]["models"]["psf"][
        "nll_at_matched_entropy"]["mean"]
    assert d["below_floor"]["psf"] == [0, 1, 2] and d["below_floor"]["ar"] == []  # matched NLL 2.17 < floor 2.66
    one = b.planted({"planted-s0": records["planted-s0"]}, collected)
    assert one["checks"] is None and one["verdicts"] == {}


def test_a_token_flows_own_distribution_is_its_neutral_setting() -> None:
    def point(**kw) -> dict:
        return {**kw, "entropy": 3.0, "nll_per_token": kw.get("guidance", kw.get("temperature", 0)), "persistence": 0.5,
                "interval": {"persistence": [0.4, 0.6]}}

    flow = {"kind": "token_flow", "cost_setting": {"guidance": 3.0}, "gen_ppl_at_matched_entropy": None,
            "matched_entropy": {"interval": None}, "reported_point": {"guidance": 1.0},
            "sweep": [point(guidance=1.0), point(guidance=3.0)]}
    assert b.model_summary(flow, 3.0, 2.0)["nll_at_t1"] == 3.0  # guidance 3, the flow's own sampling scale
    ar = {**flow, "kind": "ar", "reported_point": {"temperature": 1.0, "top_p": 1.0},
          "sweep": [point(temperature=0.7, top_p=1.0), point(temperature=1.0, top_p=1.0)]}
    assert b.model_summary(ar, 3.0, 2.0)["nll_at_t1"] == 1.0
