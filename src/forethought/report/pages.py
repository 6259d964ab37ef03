"""Which results page shows which benchmark file, and how.

Adding a benchmark's results to the docs is one :class:`Section` in the right page's list below: the JSON file's
name, a title, the command that writes it, a function that turns the parsed JSON into markdown lines, and the
plots to show beside it. A JSON file in ``benchmarks/results/`` that no section names is still listed on its
page (by its name's prefix), so a new benchmark is visible before it has a renderer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from forethought.experiments.runner import SCHEMA
from forethought.experiments.spec import load_spec
from forethought.report import experiment, myopia, predgen, psf
from forethought.report.fmt import interval
from forethought.report.papers import MYOPIA_LM


@dataclass(frozen=True)
class Section:
    """One benchmark's results: ``render`` turns its parsed JSON into markdown lines."""

    json: str
    title: str
    command: str
    render: Callable[[dict], list[str]]
    plots: tuple[str, ...] = ()
    notes: str | Callable[[dict], str] = ""  # a reading of the results; a function when it quotes numbers
    # A glob of further files that feed the same table (e.g. one file per seed). When set, ``render`` and a
    # callable ``notes`` get {file name: parsed JSON} over ``json`` and every file matching it that exists, and
    # those files count as rendered; the section is "not produced yet" only when none of them exists.
    more: str = ""


def spec_section(name: str, lead: Callable[[dict], list[str]] | None = None) -> Section:
    """The section of a shipped experiment spec: its collected JSON (``benchmarks/results/<name>.json``) through the
    one generic renderer, with the spec's description and notes; ``lead`` (the collected JSON -> lines) puts a
    system's own table after the description."""
    spec, _ = load_spec(name)
    return Section(f"{name}.json", spec.title, f"forethought experiment run {name}",
                   lambda data: experiment.body(spec, data, lead(data) if lead else None))


def _synthetic_levels(data: dict) -> list[str]:
    return ["Per p, each model against the COPY level on its own evaluation sequences:", "",
            *myopia.synthetic_levels(data.get("derived", {}))]


def _before_runner(name: str, script: str, render: Callable[[dict], list[str]], reading: Callable[[dict], str],
                   view: Callable[[dict], dict] | None = None) -> dict[str, Callable]:
    """``render`` and ``notes`` of a section whose committed JSON a removed benchmark script wrote before the experiment
    runner: that file through its own renderer and reading, said so first; once ``forethought experiment run
    <name>`` has collected a replacement (the runner's schema), the spec's generic section instead, led by
    ``render`` and read by ``reading`` of ``view(collected)`` where ``view`` rebuilds the script's layout from it
    (its ``derived[run]['evaluation']``, left out of the generic derived tables)."""
    def collected(data: dict) -> bool:
        return data.get("schema") == SCHEMA

    def body(data: dict) -> list[str]:
        if not collected(data):
            return render(data)
        if view is None:
            return experiment.body(load_spec(name)[0], data)
        derived = {run: {k: v for k, v in d.items() if k != "evaluation"} for run, d in data["derived"].items()}
        return experiment.body(load_spec(name)[0], {**data, "derived": derived}, render(view(data)))

    def notes(data: dict) -> str:
        if collected(data):
            return reading(view(data)) if view else ""
        return (f"Produced before the experiment runner, by a benchmark script since removed (`{script}`; the "
                f"file's `command` has it exactly); no per-run records were archived. `forethought experiment run "
                f"{name}` runs the same pipeline and its collected file replaces this one.\n\n" + reading(data))

    return {"render": body, "notes": notes}


@dataclass(frozen=True)
class Page:
    """One generated page, ``docs/results/<name>.md``; ``prefix`` claims the unrendered JSON files it lists."""

    name: str
    title: str
    intro: str
    prefix: str
    sections: tuple[Section, ...]


# The notes' start of a section whose JSON a script since removed wrote before the experiment runner.
PRE_RUNNER = ("Produced before the experiment runner by a script since removed (its run folders were not archived); "
              "the command above reruns it as an experiment spec. ")

MYOPIA = Page("myopia", "Results: myopic training and pre-caching", (
    "Benchmarks of [myopic training](../myopia.md) on 2 CPU cores. Each section names the command that writes "
    "its JSON: `forethought experiment run <spec>` for the ones that are experiment specs "
    "(`forethought experiment list`). A section whose JSON was "
    "produced before the experiment runner (no archived run records) renders that JSON as it was; its spec "
    "reruns it. `make bench-myopia` runs the synthetic task, the step cost and the language-model benchmark."),
    "myopia_", (
    Section("myopia_synthetic.json", "Synthetic pre-caching task", "forethought experiment run myopia_synthetic",
            myopia.synthetic_p1, ("myopia_synthetic_curves.png", "myopia_synthetic_probe_r2.png"),
            PRE_RUNNER + "The `small` preset: the paper's architecture (2 layers, width 128, 2 heads, ReLU MLP) with "
            "PyTorch's default init for every linear layer and no final LayerNorm; the paper's model keeps GPT-2's "
            "init for the blocks and the final LayerNorm (`init: reference`, the `synthetic_paper` preset). "
            "The difference is paired by seed (the same data stream and initialisation for both models). "
            "The vanilla model learns the task and pre-caches the feature at its own position (high lag-0 probe R²); "
            "the myopic model with the same architecture, data, budget and seeds stays at the predict-zero level "
            "(at p = 1 also the copy level: every position asks the sum). The paper's vanilla level is not reached "
            "at this budget."),
    spec_section("myopia_synthetic_pgrid", _synthetic_levels),
    Section("myopia_synthetic_reference.json", "The paper's synthetic model at the CPU budget",
            "forethought experiment run myopia_synthetic_reference", myopia.synthetic,
            ("myopia_synthetic_reference_curves.png",),
            PRE_RUNNER + "One change from the `small` preset: the reference code's model (`init: reference`, "
            "final LayerNorm kept), the same data, seed, budget and optimiser."),
    Section("myopia_synthetic_reference-b512.json", "The paper's synthetic model at the paper's batch size",
            "forethought experiment run myopia_synthetic_reference-b512",
            myopia.synthetic, ("myopia_synthetic_reference-b512_curves.png",),
            PRE_RUNNER + "The reference code's model at batch 512, for as many steps as about half an hour of one "
            "CPU thread allows: a small fraction of the paper's 58,593 steps, so a model still at predict-zero here "
            "says nothing about the paper's full budget, only that this model does not start learning early."),
    spec_section("myopia_synthetic_why"),
    Section("myopia_synthetic_gpt2init.json", "Earlier runs: GPT-2's init and its final LayerNorm (ReLU)",
            "forethought experiment run myopia_synthetic", myopia.synthetic_earlier,
            ("myopia_synthetic_gpt2init_curves.png", "myopia_synthetic_gpt2init_probe_r2.png"),
            "Written by the same benchmark (then a script) while the preset still used GPT-2's init and its final "
            "LayerNorm; kept for the record. Neither model left the predict-zero level; the section above says why."),
    Section("myopia_synthetic_gelu.json", "Earlier runs: GPT-2's init, GELU MLP",
            "forethought experiment run myopia_synthetic", myopia.synthetic_earlier,
            ("myopia_synthetic_gelu_curves.png", "myopia_synthetic_gelu_probe_r2.png"),
            "Written by the same benchmark (then a script) with GPT-2's init, its final LayerNorm and a GELU MLP; "
            "kept for the record. With a smooth MLP the model does not learn: for x ~ N(0, 1) the target sin(10·x) "
            "is almost orthogonal to every low-degree polynomial of the input (its Hermite coefficients are "
            "10^k·e^−50), so a smooth MLP starts with little gradient, while a ReLU's kinks do correlate with it. "
            "In one block alone (next section) ReLU leaves the predict-zero level at once in every seed; GELU does "
            "later in two seeds of three and never in the third, so a smooth MLP slows the start rather than "
            "preventing it."),
    spec_section("myopia_sin_block"),
    spec_section("myopia_step_cost"),
    Section("myopia_lm.json", "Language modelling, WikiText-2", "forethought experiment run myopia_lm",
            myopia.lm,
            ("myopia_lm_per_position.png",),
            PRE_RUNNER + "Every model of a seed shares its initialisation and data order; local myopic and the "
            "transformer bigram run on seed 0 only, for time. The gap has the paper's "
            "sign and order for a much smaller model and budget; its interval excludes zero but is too wide to "
            "compare its size with the paper's. Per position, the myopic model is slightly better at the first "
            "position and worse at the last ones: the paper's pattern (breadcrumbs, little pre-caching). The "
            "local-myopic model reads the states of the already trained vanilla model, a head start that at this "
            "budget is worth more than what myopia costs, so its row measures that head start rather than the "
            "content of pre-cached states."),
    spec_section("myopia_families"),
    spec_section("myopia_pythia_lm"),
    spec_section("myopia_horizon"),
    spec_section("myopia_gradients"),
    spec_section("myopia_arithmetic"),
    spec_section("myopia_scaling"),
))

PREDGEN = Page("predgen", "Results: PredGen", (
    "Benchmarks of [PredGen](../predgen.md) on 2 CPU cores, with the offline `smollm2-135m` "
    "(SmolLM2-135M-Instruct dequantised from its 4-bit Q4_1 GGUF) + LoRA. Every method of a seed sees the same "
    "examples in the same order. Each finished run's record (results, eval predictions, training log, command) "
    "is kept in `benchmarks/results/runs/<benchmark>/`."), "predgen_", (
    spec_section("predgen_grid"),
    spec_section("predgen_paper_grid", predgen.paper_table),
    spec_section("predgen_paper_grid_llama2_13b", predgen.paper_table),
    spec_section("predgen_paper_grid_llama3_8b", predgen.paper_table),
    spec_section("predgen_mc"),
    spec_section("predgen_curves"),
    spec_section("predgen_tasks"),
    Section("predgen_sst2.json", "SST-2 dev accuracy, three seeds, small budget",
            "forethought experiment run predgen_sst2", predgen.sst2, ("predgen_sst2.png",),
            "Produced before the experiment runner, by a script since removed; its runs were not archived, so this "
            "JSON is kept as it was. `forethought experiment run predgen_sst2` reruns the same commands (and then "
            "replaces it). At this budget the three methods are within noise of each other. The reference code's "
            "numbers came from another model and unequal budgets."),
    spec_section("predgen_speed"),
    Section("predgen_mine.json", "Mutual information on SST-2 dev (MINE)", "forethought experiment run predgen_mine",
            **_before_runner("predgen_mine", "python benchmarks/predgen_mine.py", predgen.mine, lambda r: (
                "Held-out Donsker–Varadhan bounds (statistics network fitted on one half of the examples, evaluated "
                "on the other), over MINE seeds, for each method's seed-0 checkpoint of the SST-2 benchmark. For "
                "scale, a binary classifier of accuracy a carries at least H(Y) − H_b(1 − a) nats about the label, "
                "so the last-token and answer-token estimates sit where the SST-2 accuracies say. All three "
                "checkpoints look alike: at this budget PredGen's training did not make the generated answer's "
                "states more informative about the label than the Generator's, nor than the pooled prompt state; "
                "mean pooling loses about a third of the information in every model.")),
            plots=("predgen_mine.png",)),
    Section("predgen_regression.json", "Regression: STS-B and WASSA-2017",
            "forethought experiment run predgen_regression", predgen.regression, (),
            "Produced before the experiment runner, by a script since removed; its runs were not archived, so this "
            "JSON is kept as it was (its runs were named without the seed). `forethought experiment run "
            "predgen_regression` reruns the same commands. "
            "One run per (task, method), seed 0, the same adapter, examples and steps for every method; steps were "
            "set so a run trains in about 20 minutes on one thread (STS-B prompts hold two sentences, WASSA's "
            "tweets are shorter). STS-B is evaluated on a seeded subset of its dev set, the same for every method, "
            "WASSA on its whole dev set (all four emotions); numbers are written with two decimals. Constrained "
            "decoding gives no parse failures; the expected-value decoder beats the greedy number in every case, as "
            "MSE rewards averaging over the model's distribution of well-formed numbers. At this budget the "
            "Predictor is best on both tasks, PredGen's adapter is close on STS-B, and the plain Generator is far "
            "behind: learning to write the number by teacher forcing alone is slow. One seed per cell, so "
            "differences of a few hundredths are within noise."),
    spec_section("predgen_words_sst2"),
    spec_section("predgen_answer_tokens"),
))

PSF = Page("psf", "Results: Predictive State Flow", (
    "Benchmarks of [Predictive State Flow](../psf.md) on 2 CPU cores: WikiText-2 with the SmolLM2 judge, and a "
    "planted corpus whose true generator gives exact likelihoods."), "psf_", (
    Section("psf_wikitext.json", "WikiText-2: PSF against its ablations, AR and a token-level flow",
            "forethought experiment run psf_wikitext", **_before_runner(
                "psf_wikitext", "python benchmarks/psf_wikitext.py --jobs 2 --threads 1 --eval-threads 2 -- "
                "--codes.enabled false", psf.wikitext, psf.wikitext_reading, psf.evaluation),
            plots=("psf_wikitext_curves.png",)),
    Section("psf_wikitext_codes.json", "WikiText-2 with realization codes: the main and state-only configurations",
            "forethought experiment run psf_wikitext_codes", **_before_runner(
                "psf_wikitext_codes", "python benchmarks/psf_wikitext.py ... --compare-runs "
                "runs/bench-psf-wikitext-codes/psf_codes1000 -- --model.code_mean_norm batch --model.code_in_init "
                "normal --prior.state_only_variant true", psf.wikitext, psf.wikitext_codes_reading, psf.evaluation),
            plots=("psf_wikitext_codes_curves.png",)),
    Section("psf_planted.json", "Planted corpus, three training seeds", "forethought experiment run psf_planted",
            **_before_runner("psf_planted", "python benchmarks/psf_planted.py --jobs 1, then --collect-only with "
                            "--codes-runs 'runs/psf-codes/main-s{seed}'", psf.planted, psf.planted_reading)),
    Section("psf_states_ablation.json", "What made the states matter (planted corpus)",
            "forethought experiment run psf_states_ablation", **_before_runner(
                "psf_states_ablation", "python benchmarks/psf_states_ablation.py", psf.states_ablation,
                lambda r: load_spec("psf_states_ablation")[0].notes.strip())),
    spec_section("psf_prompted"),
    Section("psf_codes_pilot.json", "Realization codes: which option makes the decoder use them (planted corpus)",
            "forethought experiment run psf_codes_pilot", **_before_runner(
                "psf_codes_pilot", "python benchmarks/psf_codes_pilot.py --seed N --out "
                "benchmarks/results/psf_codes_pilot_sN.json, seed 0 to psf_codes_pilot.json", psf.codes_pilot,
                psf.codes_pilot_reading), more="psf_codes_pilot_s[0-9]*.json"),
    spec_section("psf_codes"),
    spec_section("psf_planted_ceiling"),
    spec_section("psf_code_dropout"),
    spec_section("psf_trade"),
    spec_section("psf_token_flow_latents"),
))

SCALING = Page("scaling", "Results: memory of the paper presets", (
    "What the [scaling guide](../scaling.md) refers to."), "preset_", (
    spec_section("preset_memory"),
    Section("gpu_check.json", "The GPU check", "benchmarks/gpu_check.sh", lambda r: [f"`{r.get('command', '')}`"],
            (), "Not produced yet: nothing has run on a GPU; only its dry run (`--dry_run true`) runs, "
            "in the test suite."),
))

PAGES: tuple[Page, ...] = (MYOPIA, PREDGEN, PSF, SCALING)


@dataclass(frozen=True)
class Headline:
    """One system's headline for README: a number with its interval, read from one JSON file, and one figure."""

    system: str
    json: str
    figure: str
    figure_caption: str
    text: Callable[[dict], str]


def _myopia_headline(r: dict) -> str:
    g = r.get("derived", r)["gap_paired"]  # the script's JSON, or the myopia_lm spec's collected JSON
    return (f"myopia gap (myopic − vanilla validation loss, WikiText-2, {len(g['seeds'])} seeds) "
            f"**{g['mean']:+.3f} nats**, 95 % interval {interval(g['ci95_of_mean'], '.3f')} "
            f"(paper, GPT-2 124M: {MYOPIA_LM.values['gap']:.2f})")


def _predgen_headline(r: dict) -> str:
    d = r["comparisons"]["stsb-predgen-lr5e-4 − stsb-generator-lr5e-4 (written)"]
    return (f"STS-B Pearson of the number PredGen writes minus the Generator's (same LoRA, examples and steps, "
            f"{len(d['seeds'])} seeds) **{d['mean']:+.3f}**, 95 % interval {interval(d['ci95_of_mean'])}")


@dataclass(frozen=True)
class Block:
    """A generated block inside a hand-written system doc (``docs/<system>.md``): the lines between its two marker
    lines are rendered from one results file, so the doc's numbers are the benchmark's."""

    name: str
    json: str
    render: Callable[[dict], list[str]]


BLOCKS: tuple[Block, ...] = (
    Block("predgen-grid-lead", "predgen_grid.json", predgen.grid_lead),
    Block("predgen-own-tokens", "predgen_speed.json", predgen.own_tokens_lead),
    Block("predgen-mc-lead", "predgen_mc.json", lambda r: experiment.summary(
        load_spec("predgen_mc")[0], r, derived=("agreement", "comparisons", "selection"))),
    Block("psf-codes-lead", "psf_codes.json", psf.codes_lead),
    Block("psf-code-dropout-lead", "psf_code_dropout.json", lambda r: experiment.summary(
        load_spec("psf_code_dropout")[0], r, comparisons=True)),
    Block("psf-trade-lead", "psf_trade.json", lambda r: experiment.summary(
        load_spec("psf_trade")[0], r, derived=("state_only_minus_main",))),
    Block("psf-wikitext-codes-lead", "psf_wikitext_codes.json", psf.wikitext_codes_lead),
)


HEADLINES: tuple[Headline, ...] = (
    Headline("PredGen", "predgen_tasks.json", "predgen_curves.png",
             "PredGen: learning curves of the three methods (SST-2, ARC-Easy)", _predgen_headline),
    Headline("Predictive State Flow", "psf_wikitext_codes.json", "psf_wikitext_codes_curves.png",
             "PSF: gen-PPL against entropy, every model's sweep (WikiText-2, codes on)", psf.headline),
    Headline("Myopic training", "myopia_lm.json", "myopia_lm_per_position.png",
             "Myopia: validation loss and the gap per position (WikiText-2)", _myopia_headline),
)
