"""Device, seeding and distributed initialisation (through accelerate: one code path for 1 CPU, 1 GPU,
or many processes under ``accelerate launch`` / ``torchrun``)."""

from __future__ import annotations

import hashlib
import numbers
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from forethought.core.errors import ForethoughtError
from forethought.core.precision import mixed_precision

if TYPE_CHECKING:
    from forethought.core.run import RunConfig

DEVICES = ("auto", "cpu", "cuda", "mps")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def mix_seed(*parts: int | str) -> int:
    """One 63-bit seed from several parts (a run's seed, a step, an epoch, a stream's name), for every stream that
    is seeded from more than one number. SHA-256 of the parts' exact text, so different tuples give unrelated
    seeds: linear mixes such as ``seed * 1_000_003 + step`` collide (seed 0 at step 1,000,003 is seed 1 at step 0)
    and correlate streams that share the formula. Name each stream with a string part (``mix_seed("perm", seed,
    epoch)``) so two streams never draw the same numbers."""
    if not parts:
        raise ValueError("mix_seed needs at least one part")
    clean: list[int | str] = []
    for p in parts:
        if isinstance(p, bool) or not isinstance(p, (numbers.Integral, str)):
            raise TypeError(f"mix_seed parts are integers or strings, got {p!r}")
        clean.append(p if isinstance(p, str) else int(p))  # numpy integers hash as the same int
    digest = hashlib.sha256(repr(tuple(clean)).encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


# Streams every process must draw alike: the data (the same global batch, of which each rank takes its slice) and
# the initial weights. Every other stream (dropout masks, sampling and noise inside a loss) differs between ranks.
RANK_SHARED_STREAMS = ("data", "init")


def rank_seed(stream: str, seed: int, rank: int) -> int:
    """The seed of random stream ``stream`` on process ``rank`` of a run seeded ``seed``: the rank is mixed in
    except for :data:`RANK_SHARED_STREAMS`, so under DDP the ranks share their data and initial weights but do
    not repeat each other's dropout masks."""
    return mix_seed(stream, seed) if stream in RANK_SHARED_STREAMS else mix_seed(stream, seed, rank)


def seed_rank_streams(rank: int, world_size: int) -> None:
    """Under several processes, move this rank's global torch stream (CPU and CUDA: dropout, noise drawn in a
    loss) to its own seed, drawn from the stream every rank holds alike at that point (seeded alike for equal
    weights) and mixed with the rank by :func:`rank_seed`. One process keeps its stream as it is."""
    if world_size > 1:
        torch.manual_seed(rank_seed("dropout", int(torch.randint(0, 2**62, (1,))), rank))


def step_generator(seed: int, step: int, salt: int = 0) -> torch.Generator:
    """A CPU generator that depends only on (seed, step, salt): data for step s is the same whether the run
    was interrupted or not, and on every rank, so a resumed or multi-process run sees the same data."""
    g = torch.Generator()
    g.manual_seed(mix_seed(int(seed), int(step), int(salt)))
    return g


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside a DDP / accelerate wrapper (which keeps it in ``.module``), or the model itself."""
    return getattr(model, "module", model)


@dataclass
class Runtime:
    accelerator: object
    device: torch.device
    rank: int
    world_size: int
    precision: str = "fp32"  # fp32 | bf16 | fp16 (the accelerator's mixed precision)

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def check_device(device: str, key: str = "--run.device") -> str:
    """Validate a device name (``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps``) against this machine: asking for
    an accelerator that is not there is an error, never a silent fall-back to the CPU. ``key`` is the option the
    advice names."""
    name = device.strip().lower()
    kind, _, index = name.partition(":")
    if kind not in DEVICES or (index and (kind != "cuda" or not index.isdigit())):
        raise ForethoughtError(f"unknown device '{device}' (choose from auto, cpu, cuda, cuda:N, mps)")
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise ForethoughtError(f"device '{device}' was asked for, but CUDA is not available on this machine "
                                   f"(use {key} cpu or auto)")
        if index and int(index) >= torch.cuda.device_count():
            raise ForethoughtError(f"device '{device}': this machine has {torch.cuda.device_count()} CUDA device(s)")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise ForethoughtError(f"device '{device}' was asked for, but MPS is not available on this machine")
    return name


def pick_device(device: str, key: str = "--device") -> torch.device:
    """A checked device for single-process work (sampling, evaluation): ``auto`` = cuda if present, else cpu."""
    name = check_device(device, key)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def rng_state() -> dict:
    """Every RNG a run draws from: torch CPU, CUDA (all devices), numpy and Python, in types that
    ``torch.load(weights_only=True)`` accepts (tensors, ints, strings, tuples)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(gauss)),
            "python": random.getstate()}


def set_rng_state(state: dict) -> None:
    """Restore :func:`rng_state`. CUDA states are restored when this machine has as many devices as the saved
    run (a checkpoint moved to a CPU machine resumes with exact CPU streams)."""
    torch.set_rng_state(state["torch"])
    cuda = list(state.get("cuda", []))
    if cuda and torch.cuda.is_available() and torch.cuda.device_count() == len(cuda):
        torch.cuda.set_rng_state_all(cuda)
    if "numpy" in state:
        kind, keys, pos, has_gauss, gauss = state["numpy"]
        np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    if "python" in state:
        version, internal, gauss_next = state["python"]
        random.setstate((version, tuple(internal), gauss_next))


def compute_init(device: str = "auto", seed: int = 0, precision: str = "fp32", log_with: str = "none",
                 logging_dir: str | os.PathLike | None = None) -> Runtime:
    """Pick the device, start distributed if launched that way, set the precision (accelerate's mixed precision:
    bf16 / fp16 autocast, fp16 with a gradient scaler), name the tracker (``log_with``; started by the trainer,
    writing under ``logging_dir``), and seed every RNG."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    device = check_device(device)
    if device.startswith("cuda:"):
        raise ForethoughtError(f"device '{device}': training picks its devices through accelerate; use "
                               "--run.device cuda (with CUDA_VISIBLE_DEVICES) or cpu")
    cpu = device == "cpu" or (device == "auto" and not torch.cuda.is_available())
    mixed = mixed_precision(precision)
    if precision == "fp16" and cpu:  # accelerate would silently train in fp32: it has no fp16 autocast on the CPU
        raise ForethoughtError("run.precision fp16 needs a GPU (accelerate has no fp16 autocast on the CPU); on the "
                               "CPU use --run.precision bf16 or fp32")
    launched = os.environ.get("ACCELERATE_MIXED_PRECISION", "no").lower()  # set by accelerate launch's config
    if launched not in ("no", mixed):  # the run's setting would win silently: say so instead
        raise ForethoughtError(f"accelerate launch asks for mixed_precision {launched} but the run for precision "
                               f"{precision}: forethought reads --run.precision (pass --run.precision {launched})")
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if cpu and distributed:
        os.environ.setdefault("ACCELERATE_USE_CPU", "true")
    if not distributed:
        # accelerate keeps one state per process and refuses a second Accelerator at another precision; a single
        # process that trains at several (tests, notebooks, benchmark scripts) starts it afresh each time
        AcceleratorState._reset_state()
    trackers = None if log_with == "none" else log_with
    acc = Accelerator(cpu=cpu, mixed_precision=mixed, log_with=trackers,
                      project_dir=None if trackers is None else str(logging_dir or "."))
    seed_everything(seed)
    return Runtime(acc, acc.device, acc.process_index, acc.num_processes, precision)


def runtime_for(run: RunConfig) -> Runtime:
    """:func:`compute_init` with a run's settings (device, seed, precision, tracker; trackers write in the run's
    folder)."""
    return compute_init(run.device, run.seed, run.precision, run.log_with, Path(run.out_dir) / run.name)
