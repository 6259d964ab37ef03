"""What training a model costs in memory, before it starts: parameters, trainable parameters and the bytes of
weights, gradients and AdamW states (activations come on top and depend on the batch); the check against a CUDA
device's free memory; and the switch for activation checkpointing (fewer activations kept, blocks recomputed in
the backward pass)."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from forethought.core.errors import ForethoughtError

HALF = 2  # bytes per element of a bf16 / fp16 copy


def unique_parameters(params: Iterable[torch.nn.Parameter]) -> list[torch.nn.Parameter]:
    """Each parameter once (tied weights share one tensor)."""
    seen: dict[int, torch.nn.Parameter] = {}
    for p in params:
        seen.setdefault(id(p), p)
    return list(seen.values())


def estimate_training_memory(model: torch.nn.Module, precision: str,
                             trainable: Iterable[torch.nn.Parameter] | None = None, shards: int = 1) -> dict[str, int]:
    """Parameter counts and bytes per process, from the parameters' own dtypes (what is allocated):

    * weights: every parameter; gradients: the trainable ones, in their dtype; AdamW: two states per trainable
      element (``exp_avg``, ``exp_avg_sq``), in the parameter's dtype (as torch's AdamW allocates them);
    * autocast copies (bf16 / fp16 precision): autocast casts each fp32 matrix to 16 bits for its matmuls and the
      copy is kept for the backward pass, so count one 2-byte copy of every fp32 parameter with 2+ dimensions.

    ``trainable``: the parameters the optimizer updates (default: those that require grad). ``shards``: processes
    that split weights, gradients and optimizer states between them (FSDP's full sharding), else 1."""
    params = unique_parameters(model.parameters())
    train = unique_parameters(trainable if trainable is not None else (p for p in params if p.requires_grad))

    def nbytes(ps: list[torch.nn.Parameter]) -> int:
        return sum(p.numel() * p.element_size() for p in ps)

    copies = 0
    if precision in ("bf16", "fp16"):
        copies = sum(p.numel() * HALF for p in params if p.dtype == torch.float32 and p.dim() >= 2)
    out = {"parameters": sum(p.numel() for p in params), "trainable_parameters": sum(p.numel() for p in train),
           "weights_bytes": nbytes(params) // shards, "gradients_bytes": nbytes(train) // shards,
           "optimizer_bytes": 2 * nbytes(train) // shards, "autocast_copies_bytes": copies // shards}
    out["total_bytes"] = sum(v for k, v in out.items() if k.endswith("_bytes"))
    return out


def human_bytes(n: float) -> str:
    """``1536`` -> ``1.5 KB`` (powers of 1024, up to GB)."""
    units, i = ("B", "KB", "MB", "GB"), 0
    while n >= 1024 and i < len(units) - 1:
        n, i = n / 1024, i + 1
    return f"{n:.0f} B" if i == 0 else f"{n:.1f} {units[i]}"


def describe_memory(est: dict[str, int], precision: str) -> str:
    """The estimate in one line, for the log before training."""
    gb = human_bytes
    return (f"model: {est['parameters']:,} parameters, {est['trainable_parameters']:,} trainable; memory at "
            f"{precision} before activations: weights {gb(est['weights_bytes'])} + gradients "
            f"{gb(est['gradients_bytes'])} + AdamW {gb(est['optimizer_bytes'])} + autocast copies "
            f"{gb(est['autocast_copies_bytes'])} = {gb(est['total_bytes'])}")


def free_device_memory(device: torch.device) -> int | None:
    """Free bytes on a CUDA device (None for any other device: nothing to check against)."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    return torch.cuda.mem_get_info(device)[0]


def check_fits(est: dict[str, int], device: torch.device, resident_bytes: int = 0) -> None:
    """A clear error when the estimate exceeds the device's free memory. ``resident_bytes``: the model's bytes
    already on that device (counted in the estimate and missing from the free memory)."""
    free = free_device_memory(device)
    need = est["total_bytes"] - resident_bytes
    if free is None or need <= free:
        return
    raise ForethoughtError(
        f"training needs about {human_bytes(need)} on {device} for weights, gradients and AdamW states (before "
        f"activations) but only {human_bytes(free)} is free: load the base in bf16 (--base_dtype bf16, "
        "--run.precision bf16), train LoRA adapters instead of every weight, or shard over GPUs with FSDP (untested) "
        "(accelerate launch --config_file configs/accelerate/fsdp.yaml); --train.grad_accum and "
        "--train.activation_checkpointing true shrink the activations on top")


def resident_bytes(model: torch.nn.Module, device: torch.device) -> int:
    """Bytes of the model's parameters already on ``device``."""
    return sum(p.numel() * p.element_size() for p in unique_parameters(model.parameters())
               if p.device.type == device.type and (device.index is None or p.device.index == device.index))


def activation_checkpointing_on(model: torch.nn.Module) -> bool:
    """Whether any model inside ``model`` checkpoints activations now (HF layers' ``gradient_checkpointing``
    flag, our GPT's ``activation_checkpointing``): what the trainer puts back when it is done."""
    return any(getattr(m, "gradient_checkpointing", False) is True or getattr(m, "activation_checkpointing", False)
               is True for m in model.modules())


def set_activation_checkpointing(model: torch.nn.Module, on: bool) -> int:
    """Switch activation checkpointing on (or off) in every model inside ``model`` that has the HF switch
    (``activation_checkpointing_enable``, or ``gradient_checkpointing_enable`` before transformers 5.2x; our GPT
    has the same switch), with non-reentrant checkpoints, the outermost model only where they nest. Returns how
    many were switched; turning it on where none has it is an error."""
    done: list[str] = []
    for name, m in model.named_modules():
        if any(d == "" or name == d or name.startswith(d + ".") for d in done):
            continue
        # looked up on the class: peft's wrappers forward unknown attributes to the model they wrap
        new = getattr(type(m), "activation_checkpointing_enable", None) is not None
        if not new and getattr(type(m), "gradient_checkpointing_enable", None) is None:
            continue
        if getattr(m, "supports_gradient_checkpointing", True) is False:
            continue
        kwargs = {"use_reentrant": False}
        if on and new:
            m.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        elif on:
            m.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        elif new:
            m.activation_checkpointing_disable()
        else:
            m.gradient_checkpointing_disable()
        done.append(name)
    if on and not done:
        raise ForethoughtError(f"train.activation_checkpointing: {type(model).__name__} has no blocks to checkpoint "
                               "(supported: HF models and forethought's GPT)")
    return len(done)
