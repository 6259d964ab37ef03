"""Myopic fine-tuning of an HF causal LM (a tiny random Llama saved locally) with LoRA, then probing it."""

import torch

from forethought.cli import main
from forethought.data.corpora import eval_windows, load_corpus_text
from forethought.data.tokenizers import load_tokenizer
from forethought.myopia.lm import load_tokens, load_variant, logits_of
from forethought.testing import tiny_llama


def test_lm_finetune_hf_llama_with_lora_and_probe(tmp_path, monkeypatch):
    monkeypatch.setenv("FORETHOUGHT_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "tiny-llama"
    tok = load_tokenizer("bpe:300", corpus_text=load_corpus_text("generated", "train"), cache_dir=tmp_path / "tok")
    tok.save_pretrained(folder)
    tiny_llama(vocab_size=len(tok), hidden_size=32, layers=2, heads=4, kv_heads=2,
               eos_token_id=tok.eos_token_id).save_pretrained(folder)
    out = tmp_path / "runs"
    code = main(["myopia", "lm", "--config", "tiny", "--base", str(folder), "--data.tokenizer", "auto",
                 "--lora_r", "4", "--variants", "[vanilla, detach_hidden, local, zero_past]",
                 "--train.steps", "4", "--train.checkpoint_every", "2", "--run.out_dir", str(out)])
    assert code == 0
    import json

    res = json.loads((out / "myopia-lm-tiny" / "results.json").read_text())
    assert res["trainable_params"] < res["params"] / 2  # LoRA: the base stays frozen
    assert {"gap", "local_myopic_bonus", "myopic_minus_local", "transformer_bigram"} <= res.keys()
    ckpt = out / "myopia-lm-tiny" / "detach_hidden" / "step-000004"
    assert json.loads((ckpt / "manifest.json").read_text())["trainable_only"] is True
    code = main(["myopia", "probe", "--lm_run", str(out / "myopia-lm-tiny"), "--layers", "[0, 2]", "--k_max", "2",
                 "--fit_sequences", "16", "--eval_sequences", "8", "--run.out_dir", str(out)])
    assert code == 0
    probe = json.loads((out / "myopia-probe" / "results.json").read_text())
    assert set(probe["variants"]["vanilla"]) == {"layer 0", "layer 2"}
    # The probes decode the fine-tuned model: its trained LoRA adapters are restored (B starts at zero), and the
    # last layer's k = 1 probe, a map from the LM head's input to itself, scores what the model itself scores on
    # the same validation windows (to within one position of the 8 × 31 scored).
    model, lm_cfg = load_variant(out / "myopia-lm-tiny", "detach_hidden")
    assert all(p.abs().sum() > 0 for n, p in model.named_parameters() if "lora_B" in n)
    ids = eval_windows(load_tokens(lm_cfg)[1], 8, lm_cfg.data.seq_len)
    with torch.no_grad():
        hits = logits_of(model, ids)[:, :-1].argmax(-1) == ids[:, 1:]
    own = hits.float().mean().item()
    assert abs(probe["variants"]["detach_hidden"]["layer 2"][0] - own) <= 1.0 / hits.numel(), (probe, own)


def test_myopic_llama_with_fp32_weights_under_bf16_autocast() -> None:
    """Full fine-tuning in mixed precision: fp32 weights under bf16 autocast give the fused form bf16 v but fp32
    q and k (RoPE's cos / sin are fp32); it casts them to one dtype, and its gradients match the explicit form's
    under the same autocast (bf16 rounding: a loose tolerance)."""
    import copy

    import torch.nn.functional as F

    from forethought.myopia.wrap import make_myopic

    base = tiny_llama(vocab_size=64, hidden_size=32, layers=2, heads=4, kv_heads=2, seed=1).train()
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    grads = {}
    for impl in ("fast", "reference"):
        model = make_myopic(copy.deepcopy(base), mode="detach_hidden", implementation=impl)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(input_ids=ids, use_cache=False).logits
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, 64).float(), ids[:, 1:].reshape(-1))
        loss.backward()
        assert torch.isfinite(loss)
        grads[impl] = torch.cat([p.grad.flatten() for p in model.parameters()])
    err = (grads["fast"] - grads["reference"]).norm() / grads["reference"].norm()
    assert err < 0.05, err
