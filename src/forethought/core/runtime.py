"""Device, seeding and distributed initialisation (through accelerate: one code path for 1 CPU, 1 GPU,
or many processes under ``accelerate launch`` / ``torchrun``)."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def step_generator(seed: int, step: int, salt: int = 0) -> torch.Generator:
    """A CPU generator that depends only on (seed, step, salt): data for step s is the same whether the run
    was interrupted or not, and on every rank, which makes resume and multi-process runs exact."""
    g = torch.Generator()
    g.manual_seed((seed * 1_000_003 + step * 7_919 + salt * 104_729) % (2**63 - 1))
    return g


@dataclass
class Runtime:
    accelerator: "object"
    device: torch.device
    rank: int
    world_size: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def compute_init(device: str = "auto", seed: int = 0, mixed_precision: str = "no") -> Runtime:
    """Pick the device, start distributed if launched that way, and seed every RNG."""
    from accelerate import Accelerator

    cpu = device == "cpu" or (device == "auto" and not torch.cuda.is_available())
    if cpu and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        os.environ.setdefault("ACCELERATE_USE_CPU", "true")
    acc = Accelerator(cpu=cpu, mixed_precision=mixed_precision)
    seed_everything(seed)
    return Runtime(acc, acc.device, acc.process_index, acc.num_processes)
