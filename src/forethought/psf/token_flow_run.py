"""``forethought psf token-flow``: train the token-level flow baseline (forethought.psf.token_flow) beside a
finished ``psf recipe`` run that trained the AR baseline (``baselines: [ar]``).

- **Space**: the AR baseline's token table, frozen (the flow models the tokens the AR model embeds).
- **Batches**: exactly the AR baseline's: the recipe's own batch function (forethought.psf.recipe.recipe_batches:
  the same seed, window alignment and batch size), for the AR stage's number of steps unless ``steps`` is set,
  so the flow sees the same training windows and tokens. Optimiser settings are the AR stage's.
- **Latents**: contextual (the default, ELF's kind): the AR baseline's hidden states of each training window
  (frozen; ``token_flow.latent_layer`` -1, the default: the last, after its final norm; k: after block k), or
  with ``token_flow.latent_encoder`` a Hugging Face encoder's (ELF-B's: T5-small's, which reads the whole window),
  standardised by ``token_flow.latent_mean`` / ``latent_std`` (0 = measured on ``latent_batches`` training
  batches and written into the saved config); or the frozen token table.
- **Optimiser**: ``optimizer: elf`` (default) ELF-B's settings in the shared AdamW trainer (lr = blr·batch/256,
  constant after a warmup, no weight decay, beta2 0.95, clip 1); ``ar`` the AR stage's.
- **Size**: ``size: matched`` (default) takes PSF's width and head count and the depth whose trained parameters
  are closest to PSF encoder + decoder; other widths (nearest first) only when no depth lands within
  ``param_tolerance``, and an error when none does. ``size: config`` takes ``token_flow.*`` as given.
- **Output**: a normal run folder (``<out_dir>/<name>``, default beside the recipe run) with checkpoints,
  metrics.jsonl and results.json (sizes, the parameter ratio, training tokens, the loss curve, and
  ``first_look``: the decoder head's cross-entropy from clean validation latents and the unigram entropy of a
  few samples' token ids beside the validation windows', see :func:`first_look`), which
  ``forethought psf eval --compare [<folder>]`` evaluates beside the recipe's models. ``--resume auto`` continues.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forethought.core.config import load_config
from forethought.core.errors import ForethoughtError, first_line
from forethought.core.io import previous_results, read_json_object, same_results
from forethought.core.train_config import TrainConfig
from forethought.psf.config import TokenFlowConfig, TokenFlowRunConfig

if TYPE_CHECKING:  # torch and the model load only when a flow trains
    from collections.abc import Callable

    import numpy as np
    import torch

    from forethought.psf.token_flow import TokenFlow


def check_recipe_run(folder: Path) -> dict:
    """The recipe run's results.json, or one readable error: not a finished recipe run, or no AR baseline."""
    if not (folder / "config.yaml").is_file() or not (folder / "results.json").is_file():
        raise ForethoughtError(f"{folder} is not a finished 'psf recipe' run folder (config.yaml, results.json)")
    results = read_json_object(folder / "results.json", ("stages",))
    if "ar" not in results["stages"]:
        raise ForethoughtError(f"{folder} has no AR baseline (train the recipe with --baselines [ar]); the token "
                               "flow needs its token table and batches")
    return results


def matched_size(base: TokenFlowConfig, width: int, heads: int, target: int, dim: int, vocab: int,
                 tolerance: float) -> tuple[TokenFlowConfig, int]:
    """The flow config whose trained parameters are closest to ``target`` (PSF encoder + decoder): PSF's width
    and head count, depth 1..32; other widths (multiples of ``heads``, nearest first) only when no depth lands
    within ``tolerance``. Returns (config, parameter count); raises when nothing lands within it."""
    import torch

    from forethought.psf.token_flow import TokenFlow

    widths = sorted({max(heads, round(width * f / heads) * heads) for f in (1.0, 0.75, 1.25, 0.5, 1.5, 2.0)},
                    key=lambda w: abs(w - width))
    table = torch.zeros(vocab, dim)  # the count does not depend on the table's values (a buffer)
    best: tuple[TokenFlowConfig, int] | None = None
    for w in widths:
        for layers in range(1, 33):
            cfg = replace(base, n_embd=w, n_layer=layers, n_head=heads)
            n = TokenFlow(cfg, table).num_params()
            if best is None or abs(n / target - 1) < abs(best[1] / target - 1):
                best = (cfg, n)
            if n > target * (1 + tolerance):
                break
        if abs(best[1] / target - 1) <= tolerance:
            return best
    assert best is not None
    raise ForethoughtError(f"no token-flow size within ±{tolerance:.0%} of PSF encoder + decoder ({target} "
                           f"parameters); closest {best[1]} ({best[1] / target:.3f}); use size: config")


def elf_train_config(base: TrainConfig, blr: float, warmup_fraction: float) -> TrainConfig:
    """ELF-B's optimisation settings on the AR stage's steps and batch size (ELF's train.py: lr = blr·global
    batch/256, a linear warmup then a constant rate, no weight decay, AdamW's beta2 0.95, clip 1; its Muon is
    not in the shared trainer)."""
    return replace(base, lr=blr * base.batch_size / 256, schedule="constant",
                   warmup_steps=int(warmup_fraction * base.steps), weight_decay=0.0, beta2=0.95, grad_clip=1.0)


def latent_encoder_shape(name: str) -> tuple[int, int]:
    """(vocabulary, layers) of a Hugging Face encoder from its config alone (before any weights load)."""
    from transformers import AutoConfig

    from forethought.core.env import resolve_model_path

    try:
        c = AutoConfig.from_pretrained(resolve_model_path(name))
    except (OSError, ValueError) as e:
        raise ForethoughtError(f"token_flow.latent_encoder {name!r} cannot be loaded (a Hugging Face id reachable "
                               f"from here or a local folder with config.json): {first_line(e)}") from None
    layers = getattr(c, "num_layers", None) or getattr(c, "num_hidden_layers", None)
    if not c.vocab_size or not layers:
        raise ForethoughtError(f"token_flow.latent_encoder {name!r}: its config names no vocabulary or layers")
    return int(c.vocab_size), int(layers)


def load_latent_encoder(name: str) -> torch.nn.Module:
    """The encoder of a Hugging Face model (an encoder-decoder's encoder stack), frozen, in eval mode."""
    import transformers

    from forethought.core.env import resolve_model_path

    path = resolve_model_path(name)
    config = transformers.AutoConfig.from_pretrained(path)
    # an encoder-decoder's encoder alone where the library has the class (T5EncoderModel for T5's config)
    only = getattr(transformers, config.__class__.__name__.removesuffix("Config") + "EncoderModel", None)
    if only is not None:
        enc = only.from_pretrained(path)
    else:
        model = transformers.AutoModel.from_pretrained(path)
        enc = model.get_encoder() if getattr(config, "is_encoder_decoder", False) else model
    for p in enc.parameters():
        p.requires_grad_(False)
    return enc.eval()


def latents_description(fcfg: TokenFlowConfig, recipe_name: str, hf: bool) -> str:
    """What the flow models, in words, for results.json."""
    if fcfg.latents != "contextual":
        return f"{recipe_name}/ar token table (frozen)"
    source, kind = (fcfg.latent_encoder, "frozen, whole window") if hf else (f"{recipe_name}/ar", "frozen")
    return (f"{source} {_layer_name(fcfg.latent_layer, hf)} ({kind}), standardised by mean "
            f"{fcfg.latent_mean:.4g}, std {fcfg.latent_std:.4g}")


def _layer_name(layer: int, hf: bool = False) -> str:
    return ("last hidden states" if layer == -1 else ("embeddings" if hf else "token and position embeddings")
            if layer == 0 else f"hidden states after block {layer}")


def first_look(model: TokenFlow, valid: np.ndarray, seq_len: int, encode: Callable[[torch.Tensor], torch.Tensor] | None,
               seed: int, n: int = 16) -> dict[str, Any]:
    """A judge-free look at a trained flow, on ``n`` consecutive validation windows (``valid``: the 1-D token
    array): the decoder head's cross-entropy from their clean and decoder-noised latents (contextual latents with
    a decoder branch; forethought.psf.token_flow.decoder_cross_entropy) and the mean unigram entropy of the token
    ids of ``n`` samples at the flow's own settings beside the windows' own (psf eval's judge entropy is the
    measured one; this one needs no judge)."""
    import torch

    from forethought.eval.judge import mean_unigram_entropy
    from forethought.psf.token_flow import decoder_cross_entropy, sample_token_flow

    n = min(n, len(valid) // seq_len)
    windows = torch.tensor(valid[: n * seq_len]).reshape(n, seq_len).long()  # (n, L), a copy of the corpus array
    dev = model.table.device
    gen = torch.Generator().manual_seed(seed)
    out: dict[str, Any] = {"windows": n}
    if encode is not None and model.decoder_branch:
        out["decoder_ce"] = decoder_cross_entropy(model, windows.to(dev), encode(windows.to(dev)), gen)
    ids = sample_token_flow(model, n, generator=gen)  # (n, L)
    out["sample_unigram_entropy"] = mean_unigram_entropy(ids.tolist())
    out["valid_unigram_entropy"] = mean_unigram_entropy(windows.tolist())
    return out


def run(cfg: TokenFlowRunConfig, resume: str | None = None) -> dict[str, Any]:
    cfg.validate()  # also when the config was built in Python rather than loaded
    folder = Path(cfg.recipe_run)
    recipe_results = check_recipe_run(folder)  # before any model loads or anything is written

    import torch

    from forethought.core.run import Run
    from forethought.core.runtime import compute_init
    from forethought.psf.build import load_data
    from forethought.psf.generate import load_recipe
    from forethought.psf.recipe import RecipeConfig, recipe_batches
    from forethought.psf.token_flow import (
        TokenFlow,
        contextual_latents,
        embedding_table,
        encoder_latents,
        load_token_flow,
        train_token_flow_batches,
    )

    recipe = load_config(RecipeConfig, folder / "config.yaml", [])
    layer, hf = cfg.token_flow.latent_layer, cfg.token_flow.latents == "contextual" and cfg.token_flow.latent_encoder
    if hf:  # before any model loads: the encoder must read the recipe's ids and have the layer asked for
        enc_vocab, enc_layers = latent_encoder_shape(cfg.token_flow.latent_encoder)
        if layer > enc_layers:
            raise ForethoughtError(f"token_flow.latent_layer must be -1 or 0..{enc_layers} (the latent encoder's "
                                   f"layers), got {layer}")
        if enc_vocab < int(recipe_results.get("vocab_size") or 0):
            raise ForethoughtError(f"token_flow.latent_encoder {cfg.token_flow.latent_encoder!r} reads "
                                   f"{enc_vocab} token ids, fewer than the recipe tokenizer's "
                                   f"{recipe_results['vocab_size']}: its tokenizer is not the recipe's")
    elif cfg.token_flow.latents == "contextual" and layer > recipe.ar.model.n_layer:  # before any model loads
        raise ForethoughtError(f"token_flow.latent_layer must be -1 or 0..{recipe.ar.model.n_layer} (the AR "
                               f"baseline's blocks), got {layer}")
    art = load_recipe(folder)
    if art.ar is None:
        raise ForethoughtError(f"{folder} has no AR baseline checkpoint")
    L, seed = recipe.model.seq_len, recipe.run.seed
    table = embedding_table(art.ar)  # (V, D) frozen
    encoder = load_latent_encoder(cfg.token_flow.latent_encoder) if hf else None
    if encoder is not None:  # the latents' width is the encoder's; its rows of the recipe's ids: (V, D_enc)
        table = encoder.get_input_embeddings().weight.detach().float()[:table.shape[0]].clone()
    counts = art.model.num_params()
    target = counts["encoder"] + counts["decoder"]
    base = replace(cfg.token_flow, seq_len=L)
    if cfg.size == "matched":
        fcfg, n = matched_size(base, art.model.config.n_embd, art.model.config.n_head, target, table.shape[1],
                               table.shape[0], cfg.param_tolerance)
    else:
        fcfg, n = base, TokenFlow(base, table).num_params()
    tcfg = copy.deepcopy(recipe.ar.train)
    ar_res = recipe_results["stages"]["ar"]
    tcfg.steps = cfg.steps or int(ar_res["steps"])  # the AR baseline's steps and batch size: its windows and tokens
    if cfg.optimizer == "elf":
        tcfg = elf_train_config(tcfg, cfg.blr, cfg.warmup_fraction)
    train_tokens, valid, _ = load_data(recipe.data, L)
    rt = compute_init(cfg.device, seed)
    batches = recipe_batches(recipe, train_tokens, tcfg.batch_size)
    encode = None
    if fcfg.latents == "contextual":
        if encoder is not None:
            enc = encoder.to(rt.device)

            def raw(tokens: torch.Tensor) -> torch.Tensor:
                return encoder_latents(enc, tokens, layer)  # (B, L, D_enc)
        else:
            ar = art.ar.to(rt.device).eval()
            for p in ar.parameters():
                p.requires_grad_(False)  # frozen: the encoder of the latents, not trained

            def raw(tokens: torch.Tensor) -> torch.Tensor:
                return contextual_latents(ar, tokens, layer)  # (B, L, D)
        if fcfg.latent_std == 0:  # measured, then saved with the flow's config
            h = torch.cat([raw(batches(s)["tokens"].to(rt.device)) for s in range(cfg.latent_batches)])
            fcfg = replace(fcfg, latent_mean=float(h.mean()), latent_std=float(h.std()))
        mean, std = fcfg.latent_mean, fcfg.latent_std

        def encode(tokens: torch.Tensor) -> torch.Tensor:
            return (raw(tokens) - mean) / std  # (B, L, D)
    torch.manual_seed(seed)
    model = TokenFlow(fcfg, table)
    out_dir = cfg.out_dir or str(folder.parent)
    run_ = Run.create(out_dir, cfg.name, cfg)
    out = train_token_flow_batches(model, batches, tcfg, run_, rt, resume=resume, encode=encode)
    res = {"recipe_run": str(folder), "params": n, "psf_encoder_decoder": target, "ratio": n / target,
           "size": cfg.size, "config": asdict(fcfg), "steps": tcfg.steps, "batch_size": tcfg.batch_size,
           "training_tokens": tcfg.steps * tcfg.batch_size * L, "ar_training_tokens": ar_res.get("training_tokens"),
           "train_wall_s": out["wall_s"], "final_loss": out.get("final_loss"), "curve": out["curve"],
           "latents": latents_description(fcfg, folder.name, encoder is not None),
           "first_look": first_look(load_token_flow(run_.dir, rt.device)[0], valid, L, encode, seed),
           # ^ the weights psf eval samples (EMA where kept)
           "optimizer": {"kind": cfg.optimizer, "lr": tcfg.lr, "schedule": tcfg.schedule,
                         "warmup_steps": tcfg.warmup_steps, "weight_decay": tcfg.weight_decay, "beta2": tcfg.beta2,
                         "grad_clip": tcfg.grad_clip},
           "batches": "the recipe's (recipe_batches, its seed)"}
    previous = previous_results(run_.dir)
    if same_results(previous, res, volatile=("train_wall_s",), folders=("recipe_run",)):
        # nothing trained (a finished run resumed, its recipe run named another way): the results.json whose hash
        # keys psf eval's cache stays as the training left it
        print(f"token flow: {run_.dir} already finished; results.json kept")
        return previous
    run_.write_results(res)
    print(f"token flow: {n} parameters ({n / target:.3f} of PSF encoder + decoder), {tcfg.steps} steps; "
          f"wrote {run_.dir}")
    return res
