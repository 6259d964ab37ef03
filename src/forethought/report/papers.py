"""The papers' own numbers, shown beside ours on the results pages. One constant table, each entry with its
source, so that every number in the docs is either in ``benchmarks/results/*.json`` or here."""

from __future__ import annotations

from dataclasses import dataclass

from forethought.experiments.paper_grid import PAPER_LLAMA2_7B, PAPER_SOURCE


@dataclass(frozen=True)
class Published:
    """Numbers from one source, keyed by what they measure."""

    source: str
    setting: str
    values: dict[str, float]
    setting_note: str = ""  # where a value beyond the source's own text comes from


MYOPIA_LM = Published(
    source="Wu et al. 2024, Do language models plan for future tokens?, "
           "[arXiv:2404.00859](https://arxiv.org/abs/2404.00859)",
    setting="GPT-2 124M trained from scratch, validation loss in nats",
    values={"vanilla": 3.28, "myopic": 3.40, "gap": 0.12, "transformer_bigram": 5.33, "local_myopic": 3.26,
            "local_myopic_bonus": 0.02, "myopic_minus_local": 0.14, "gap_over_context": 0.0585},
)

MYOPIA_PYTHIA = Published(
    source=MYOPIA_LM.source,
    setting="Pythia 14M to 2.8B fine-tuned vanilla and myopic, myopic − vanilla in nats",
    values={"gap_160m": 0.10, "gap_2.8b": 0.23},
)

MYOPIA_SYNTHETIC = Published(
    source=MYOPIA_LM.source,
    setting="the synthetic pre-caching task, p = 1: normalised loss the vanilla model reaches, and its budget",
    values={"vanilla_at_most": 0.1, "steps": 58_593, "batch_size": 512, "predict_zero_p1": 1.2569},
    # predict_zero_p1: the reference code's notebook src/notebooks/synthetic_interp_2.ipynb (nn.HuberLoss of zeros
    # against the targets of 50,000 sequences at p = 1, batches of 512), github.com/wiwu2390/FutureGPT2-public
    setting_note="its notebook synthetic_interp_2, 50,000 sequences",
)

# the paper's myopic model on the synthetic task: normalised loss per p (below the predict-zero level at p < 1)
MYOPIA_SYNTHETIC_MYOPIC = Published(
    source=MYOPIA_LM.source,
    setting="the synthetic pre-caching task: the myopic model's normalised loss per p",
    values={"p=1": 1.257, "p=0.3": 1.034, "p=0.1": 0.966, "p=0.01": 1.103},
)

PREDGEN_SST2 = Published(
    source="the PredGen reference code's SST-2 dev runs ([arXiv:2502.17817](https://arxiv.org/abs/2502.17817)), "
           "SmolLM-135M-Instruct, unequal budgets (Predictor about 1.2 epochs, Generator 5, PredGen 20)",
    setting="SST-2 dev accuracy",
    values={"predictor": 0.869, "generator": 0.905, "predgen": 0.908},
)

PREDGEN_SST2_CURVE = Published(
    source="the PredGen reference code's learning curve at lr 2e-4 (SmolLM-135M-Instruct)",
    setting="PredGen's SST-2 dev accuracy after n training examples",
    values={"12800": 0.880, "25600": 0.904},
)

PREDGEN_LLAMA2_7B = Published(
    source=PAPER_SOURCE,
    setting="the paper's table: accuracy (%) of each method per dataset (the rows the paper grid compares with)",
    values=PAPER_LLAMA2_7B,
)

PSF = Published(
    source="Rethinking the Roles of Diffusion and Decoding: Predictive-State Flows for Parallel Language "
           "Generation (model card [jinjinhe2001/PSF-ParallelLM](https://huggingface.co/jinjinhe2001/PSF-ParallelLM))",
    setting="OpenWebText, 1024-token documents, judge GPT-2 Large, 1000 samples, 197M generation parameters",
    values={"psf_gen_ppl": 22.75, "psf_entropy": 5.164, "psf_mauve": 0.93, "psf_tflops": 0.31,
            "state_only_gen_ppl": 18.95, "state_only_entropy": 5.158, "state_only_mauve": 0.85,
            "ar_gen_ppl": 15.37, "ar_entropy": 5.151, "ar_mauve": 0.95, "ar_tflops": 0.43,
            "elf_b_gen_ppl": 24.0, "elf_b_mauve": 0.73, "elf_b_tflops": 7.2,
            "content_worse_low_pct": 8, "content_worse_high_pct": 16},
)

# ELF's reference code, whose OpenWebText conventions the PSF paper follows (the PSF paper preset's table cites it)
ELF_OWT = Published(
    source="ELF reference code ([lillian039/ELF](https://github.com/lillian039/ELF)), "
           "src/configs/training_configs/train_owt_ELF-B*.yml",
    setting="ELF-B on OpenWebText: EMA decay of the sampled weights, samples per evaluation, sequence length",
    values={"ema_decay": 0.9999, "num_samples": 1000, "max_length": 1024},
)


def psf_rows() -> list[list[str]]:
    """The PSF paper's headline rows: model, gen-PPL, entropy, MAUVE@512, TFLOPs per document."""
    v = PSF.values

    def cell(key: str, spec: str) -> str:
        return format(v[key], spec) if key in v else "–"

    return [["PSF, K = 8, with codes", cell("psf_gen_ppl", ".2f"), cell("psf_entropy", ".3f"),
             cell("psf_mauve", ".2f"), cell("psf_tflops", ".2f")],
            ["PSF, state-only prior", cell("state_only_gen_ppl", ".2f"), cell("state_only_entropy", ".3f"),
             cell("state_only_mauve", ".2f"), "–"],
            ["AR, same data, 197M", cell("ar_gen_ppl", ".2f"), cell("ar_entropy", ".3f"), cell("ar_mauve", ".2f"),
             cell("ar_tflops", ".2f")],
            ["ELF-B, 32 steps", cell("elf_b_gen_ppl", ".1f"), "–", cell("elf_b_mauve", ".2f"),
             cell("elf_b_tflops", ".1f")]]

# Not a paper's number: a reference level for the planted corpus (data/planted.py, its default settings), what a
# decoder that gets no code can reach at most, computed by `forethought psf ceiling` (the psf_planted_ceiling
# spec; tests/test_psf_ceiling.py checks it against benchmarks/results/psf_planted_ceiling.json).
PLANTED_NO_CODE_CEILING = Published(
    source="the Bayes-optimal parallel decoder of the planted corpus (`forethought experiment run "
           "psf_planted_ceiling`, 20,000 documents, standard error 0.0015)",
    setting="topic persistence of documents decoded from exact predictive states with the landing token, no code",
    values={"persistence": 0.555},
)
