"""The generated docs: every results page and README's headline block equal what ``python -m forethought.report``
renders from benchmarks/results/*.json now; the renderer copes with new and missing files, names a file whose
layout changed in one line, and the hand-written docs hold no measured number that no results file holds."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from forethought.report import papers
from forethought.report.pages import BLOCKS
from forethought.report.render import BEGIN, END, block_begin, block_end, render_all, stale

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def test_committed_docs_are_current() -> None:
    old = stale(REPO)
    assert not old, f"out of date: {[str(p) for p in old]}; regenerate with: python -m forethought.report"


def _mini_repo(tmp_path: Path, files: list[str]) -> Path:
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    for name in files:
        shutil.copy(RESULTS / name, tmp_path / "benchmarks" / "results" / name)
    (tmp_path / "README.md").write_text(f"# x\n\n{BEGIN}\nold\n{END}\n\nrest\n")
    return tmp_path


def test_renderer_tolerates_new_renamed_and_missing_files(tmp_path: Path) -> None:
    root = _mini_repo(tmp_path, ["myopia_lm.json", "psf_wikitext_codes.json"])
    lm = json.loads((root / "benchmarks/results/myopia_lm.json").read_text())
    lm["vanilla_minus_local_paired"] = lm.pop("local_myopic_bonus_paired")  # a renamed difference
    lm["a_new_key"] = {"anything": [1, 2]}
    (root / "benchmarks/results/myopia_lm.json").write_text(json.dumps(lm))
    (root / "benchmarks/results/psf_future.json").write_text(json.dumps({"whatever": 1}))  # no renderer yet
    out = render_all(root)
    myopia = out[Path("docs/results/myopia.md")]
    assert "| vanilla minus local | 0 |" in myopia and "| myopia gap (myopic − vanilla) | 0, 1, 2 |" in myopia
    assert "Not produced yet: `forethought experiment run myopia_synthetic`" in myopia
    psf = out[Path("docs/results/psf.md")]
    assert "## Not rendered yet" in psf and "psf_future.json" in psf
    readme = out[Path("README.md")]
    assert readme.startswith("# x\n\n" + BEGIN) and readme.endswith(END + "\n\nrest\n") and "old" not in readme
    assert "**Predictive State Flow**: WikiText-2, realization codes on" in readme
    assert "**PredGen**: not produced yet" in readme


def _report(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "forethought.report", "--root", str(root), *args],
                          capture_output=True, text=True, timeout=120)


def test_changed_layout_is_one_clear_error(tmp_path: Path) -> None:
    root = _mini_repo(tmp_path, ["myopia_lm.json"])
    lm = json.loads((root / "benchmarks/results/myopia_lm.json").read_text())
    del lm["setup"]
    (root / "benchmarks/results/myopia_lm.json").write_text(json.dumps(lm))
    out = _report(root)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [out.stderr.strip()]
    assert "myopia_lm.json" in out.stderr and "'setup'" in out.stderr
    assert not (root / "docs").exists(), "nothing is written when a page cannot be rendered"


def test_write_then_check(tmp_path: Path) -> None:
    root = _mini_repo(tmp_path, ["predgen_tasks.json", "preset_memory.json"])
    assert _report(root, "--check").returncode == 1
    assert _report(root).returncode == 0
    assert _report(root, "--check").returncode == 0
    page = root / "docs/results/scaling.md"
    page.write_text(page.read_text().replace("| yes |", "| no |", 1))
    out = _report(root, "--check")
    assert out.returncode == 1 and "scaling.md" in out.stderr


def _numbers(value: object) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _numbers(v)]
    if isinstance(value, list):
        return [x for v in value for x in _numbers(v)]
    return []


def _without_blocks(text: str) -> str:
    """A system doc without its generated blocks (their numbers are rendered from the results files)."""
    for b in BLOCKS:
        if block_begin(b) in text:
            head, rest = text.split(block_begin(b), 1)
            text = head + rest.split(block_end(b), 1)[1]
    return text


def test_generated_blocks_in_system_docs(tmp_path: Path) -> None:
    """A block between its two marker lines in docs/<system>.md is rendered from its results file (the text around
    it is kept); a missing file says so; a block without its end line is one clear error."""
    root = _mini_repo(tmp_path, ["predgen_mc.json"])
    b = next(b for b in BLOCKS if b.json == "predgen_mc.json")
    (root / "docs").mkdir()
    doc = root / "docs" / "predgen.md"
    doc.write_text(f"# PredGen\n\nbefore\n\n{block_begin(b)}\nstale text\n{block_end(b)}\n\nafter\n")
    assert _report(root, "--check").returncode == 1
    assert _report(root).returncode == 0 and _report(root, "--check").returncode == 0
    text = doc.read_text()
    assert text.startswith("# PredGen\n\nbefore\n\n" + block_begin(b)) and text.endswith(block_end(b) + "\n\nafter\n")
    assert "stale text" not in text and "| run group | settings |" in text
    data = json.loads((RESULTS / "predgen_mc.json").read_text())
    accuracy = data["groups"]["arc-easy-generator-lmeval"]["measures"]["rank_accuracy"]["mean"]
    assert f"{accuracy:.3f}" in text  # the numbers are the file's: measures, derived comparisons, checks
    assert "| arc-easy: predgen-choices-ll-lmeval − generator-lmeval (rank) |" in text and "**met**" in text
    (root / "benchmarks/results/predgen_mc.json").unlink()
    assert _report(root).returncode == 0 and "Not produced yet: `benchmarks/results/predgen_mc.json`" in doc.read_text()
    doc.write_text(f"# PredGen\n\n{block_begin(b)}\nno end line\n")
    out = _report(root)
    assert out.returncode == 2 and "has no end line" in out.stderr and "Traceback" not in out.stderr


def test_hand_written_docs_hold_no_unbacked_measurement() -> None:
    """A number with three or more decimals in README (outside the generated block) or docs/*.md must be a value
    of some benchmarks/results file or of the papers' table at that precision: measured numbers are generated."""
    known = [x for p in RESULTS.glob("*.json") for x in _numbers(json.loads(p.read_text()))]
    known += [v for pub in vars(papers).values() if isinstance(pub, papers.Published) for v in pub.values.values()]
    readme = (REPO / "README.md").read_text()
    texts = {"README.md": readme.split(BEGIN)[0] + readme.split(END)[-1]}
    texts |= {str(p.relative_to(REPO)): _without_blocks(p.read_text()) for p in (REPO / "docs").glob("*.md")}
    bad = []
    for name, text in texts.items():
        text = re.sub(r"(arXiv:|arxiv\.org/abs/)\d{4}\.\d{4,5}", "", text)  # paper identifiers, not numbers
        for token in re.findall(r"(?<![\w.])\d+\.\d{3,}(?![\w.])", text):
            places = len(token.split(".")[1])
            if not any(abs(round(x, places) - float(token)) < 10 ** -places / 2 for x in known):
                bad.append(f"{name}: {token}")
    assert not bad, f"numbers no results file holds (generate them instead): {bad}"


def test_docs_hold_no_internal_references() -> None:
    """No issue or session numbers, and no paths outside the repository, in what a reader sees."""
    texts = [REPO / "README.md", REPO / "ARCHITECTURE.md", REPO / "CITATION.cff", *(REPO / "docs").rglob("*.md")]
    bad = [f"{p.relative_to(REPO)}: {m.group(0)}" for p in texts
           for m in re.finditer(r"\b(?:issue|session)s? #?\d+|\.\./shared|/work/", p.read_text(), re.IGNORECASE)]
    assert not bad, bad


def _anchors(path: Path) -> set[str]:
    from forethought.report.render import anchor

    return {anchor(line.lstrip("#").strip()) for line in path.read_text().splitlines() if line.startswith("#")}


def test_links_between_docs_resolve() -> None:
    """Every relative link (and image) in README and docs/ points at a file of the repository, and every
    #anchor at a heading of that file."""
    bad = []
    for page in [REPO / "README.md", *(REPO / "docs").rglob("*.md")]:
        text = page.read_text()
        targets = re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r'<img src="([^"]+)"', text)
        for target in targets:
            if re.match(r"[a-z]+://", target):
                continue
            file, _, anchor = target.partition("#")
            path = (page.parent / file).resolve() if file else page
            if not path.exists():
                bad.append(f"{page.relative_to(REPO)}: {target}")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                bad.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert not bad, bad


def test_codes_pilot_table_takes_every_seed_file(tmp_path: Path) -> None:
    """The pilot's seed files feed one table: a new seed file appears in it without edits (and with it the mean
    over seeds), an absent one leaves no trace, and none is listed as 'not rendered yet'."""
    root = _mini_repo(tmp_path, ["psf_codes_pilot.json"])
    page = render_all(root)[Path("docs/results/psf.md")]
    assert "training seeds 0." in page and "zeroing cost, mean over seeds" not in page
    assert "psf_codes_pilot_s1.json`" not in page
    assert "## Not rendered yet" not in page
    s1 = json.loads((RESULTS / "psf_codes_pilot_s1.json").read_text())
    s2 = json.loads(json.dumps(s1))
    for a in s2["arms"].values():
        a["seed"], a["zeroing_cost"]["all"]["diff"] = 2, 1.0
    del s2["arms"]["saddle"]  # a seed that did not run every arm
    (root / "benchmarks/results/psf_codes_pilot_s2.json").write_text(json.dumps(s2))
    shutil.copy(RESULTS / "psf_codes_pilot_s1.json", root / "benchmarks/results/psf_codes_pilot_s1.json")
    page = render_all(root)[Path("docs/results/psf.md")]
    assert "training seeds 0, 1, 2." in page and "zeroing cost, seed 2 [95 %]" in page
    assert "`benchmarks/results/psf_codes_pilot_s2.json`" in page and "## Not rendered yet" not in page
    row = next(line for line in page.splitlines() if line.startswith("| bn_vae |"))
    b0, b1 = (json.loads((RESULTS / n).read_text())["arms"]["bn_vae"]["zeroing_cost"]["all"]["diff"]
              for n in ("psf_codes_pilot.json", "psf_codes_pilot_s1.json"))
    assert f"| {(b0 + b1 + 1.0) / 3:+.4f} |" in row  # the mean over the three seeds
    saddle = next(line for line in page.splitlines() if line.startswith("| saddle |"))
    assert saddle.count("| – |") >= 2  # seed 2 has no saddle arm: en dashes, not a crash
    assert "## Not rendered yet" not in render_all(_mini_repo(tmp_path / "b", ["psf_codes.json"]))[
        Path("docs/results/psf.md")]


def test_wikitext_codes_reading_quotes_its_file() -> None:
    """WikiText-2 with codes on: the reading puts each run's code information (zeroing cost, KL) beside the
    predictive-vs-content comparison, and its verdict on a difference is the one the interval gives."""
    from forethought.report import psf

    r = psf.evaluation(json.loads((RESULTS / "psf_wikitext_codes.json").read_text()))
    text = psf.wikitext_codes_reading(r)
    for name in ("psf", "psf_content"):
        z = r["diagnose"][name]["codes"]["zeroing_cost"]["all"]["diff"]
        assert f"`{name}` {z:+.3f}" in text
    assert "psf_state_only" in r["other_rows"] and "The paper's two configurations" in text
    d = json.loads(json.dumps(r["differences"]["psf - psf_content"]))
    for iv, verdict in (([-0.2, -0.1], "lower for psf"), ([0.1, 0.2], "higher for psf"),
                        ([-0.1, 0.1], "the interval includes zero")):
        d["matched_entropy"].update(gen_ppl_diff=1.0, interval=[0.5, 1.5], nll_per_token_diff=sum(iv) / 2,
                                    nll_per_token_interval=iv)
        assert psf._me_diff(d).endswith(f"({verdict})")
    d["matched_entropy"]["gen_ppl_diff"] = None
    assert psf._me_diff(d) == "not bracketed by both sweeps"
    # a compared run: its line quotes its temperature-1 difference and, when its sweep stays above the references'
    # entropy, says so instead of a matched-entropy number
    for name, x in r["other_rows"].items():
        if name in ("psf_state_only", "psf_content_state_only"):
            continue
        line = psf._compared_run(name, x, r["psf"], r["differences"]["psf - " + name], r["settings"]["target_entropy"])
        assert line in text and psf._t1_diff(r["differences"]["psf - " + name]) in line
        lowest = min(q["entropy"] for q in x["sweep"])
        assert ("stays above the references'" in line) == (
            lowest > r["settings"]["target_entropy"] and x["gen_ppl_at_matched_entropy"] is None)


def test_psf_headline_quotes_codes_on_differences_and_the_token_flow_only_where_it_is_bracketed() -> None:
    from forethought.report import psf
    from forethought.report.psf import evaluation, headline

    r = evaluation(json.loads((RESULTS / "psf_wikitext_codes.json").read_text()))
    t1 = next(p for p in r["differences"]["psf - ar"]["per_point"] if p["temperature"] == 1 and p["top_p"] == 1)
    lo, hi = t1["interval"]["nll_per_token"]
    text = headline(r)
    assert f"**{t1['diff']['nll_per_token']:+.3f} [{lo:+.3f}, {hi:+.3f}]**" in text
    assert "content states" in text
    for name, x in psf.wikitext_rows(r).items():  # a token flow: its difference, or why there is none
        if x["kind"] == "token_flow":
            bracketed = None not in (x["gen_ppl_at_matched_entropy"], r["psf"]["gen_ppl_at_matched_entropy"])
            assert (psf._me_diff(r["differences"]["psf - " + name]) in text) == bracketed
            assert (f"`{name}` is not compared" in text) == (not bracketed)
    r["differences"]["psf - ar"]["per_point"] = []  # a file without the temperature-1 point says so, no number
    assert "**–**" in headline(r)


def test_smollm2_names_are_described_by_their_weights() -> None:
    """Both spellings of the offline alias name the dequantised GGUF, the hub id the hub's weights; a longer name
    that only starts like the alias is left alone."""
    from forethought.report.common import SMOLLM2, SMOLLM2_HUB, smollm2

    assert smollm2("smollm2-135m + LoRA r16") == SMOLLM2 + " + LoRA r16"
    assert smollm2("smollm2-135m-q4") == SMOLLM2
    assert smollm2("HuggingFaceTB/SmolLM2-135M-Instruct") == SMOLLM2_HUB
    assert smollm2("smollm2-135m-instruct-other") == "smollm2-135m-instruct-other"
    assert smollm2("gpt2") == "gpt2"
