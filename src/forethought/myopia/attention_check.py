"""``forethought myopia attention-check``: the one-pass myopic attention on a device (the fused kernel it calls
there) against the explicit reference form, forward and gradients, per dtype.

On the CPU the tests check the two forms in float64; on CUDA the fast form calls another fused kernel (memory-
efficient attention with its log-sum-exp) than vanilla SDPA, which no CPU run exercises. For each dtype and myopia
horizon, on random q, k, v of (batch, heads, seq_len, head_dim) with past K/V = the detached live ones
(``detach_hidden``'s values):

* ``fast_vs_reference``: the fast form against the explicit form on the same device and dtype: the forward output
  and the gradients of q, k, v for a random upstream gradient, max |difference|;
* ``fast_vs_float64`` / ``reference_vs_float64``: each against the explicit form in float64 on the CPU (the truth);
* ``forward_vs_vanilla``: the fast form's output against vanilla attention's (max |difference|, and whether they
  are bit-identical, as they are on the CPU);

``passed`` when every fast-vs-reference and fast-vs-float64 difference is within the dtype's tolerance
(``TOLERANCE``: |a − b| <= atol + rtol·|b|, gradients with 10 × atol), the same bounds as tests/test_gpu.py.
"""

from __future__ import annotations

from typing import Any

import torch

from forethought.core.run import Run
from forethought.core.runtime import mix_seed, pick_device
from forethought.myopia.attention import myopic_attention, reference_myopic_attention, vanilla_attention
from forethought.myopia.config import AttentionCheckConfig

__all__ = ["AttentionCheckConfig", "TOLERANCE", "compare", "run"]

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# rtol = atol for the forward, 10 × atol for the gradients. bf16 keeps 8 bits of mantissa, so the fused and the
# explicit form round differently at about 1e-2 of the values (O(1) here).
TOLERANCE = {"fp32": 2e-5, "bf16": 3e-2}
GRAD_ATOL_FACTOR = 10


def _run_forms(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, w: torch.Tensor, horizon: int
               ) -> dict[str, tuple[torch.Tensor, list[torch.Tensor]]]:
    """Each form's output and (dq, dk, dv) for the upstream gradient ``w``, all as float64 on the CPU."""
    out = {}
    forms = {"fast": lambda: myopic_attention(q, k, v, k.detach(), v.detach(), horizon=horizon),
             "reference": lambda: reference_myopic_attention(q, k, v, k.detach(), v.detach(), horizon=horizon),
             "vanilla": lambda: vanilla_attention(q, k, v)}
    for name, fn in forms.items():
        o = fn()
        grads = torch.autograd.grad((o * w).sum(), (q, k, v))
        out[name] = (o.detach().double().cpu(), [g.double().cpu() for g in grads])
    return out


def _diff(a: tuple[torch.Tensor, list[torch.Tensor]], b: tuple[torch.Tensor, list[torch.Tensor]], tol: float
          ) -> dict[str, Any]:
    """Max |a − b| of the output and of each gradient, and whether all are within the tolerance (b the truth)."""
    def within(x: torch.Tensor, y: torch.Tensor, atol: float) -> bool:
        return bool(((x - y).abs() <= atol + tol * y.abs()).all())

    res: dict[str, Any] = {"forward": (a[0] - b[0]).abs().max().item()}
    ok = within(a[0], b[0], tol)
    for name, ga, gb in zip(("grad_q", "grad_k", "grad_v"), a[1], b[1], strict=True):
        res[name] = (ga - gb).abs().max().item()
        ok = ok and within(ga, gb, tol * GRAD_ATOL_FACTOR)
    res["within_tolerance"] = ok
    return res


def compare(device: torch.device, dtype: str, horizon: int, shape: tuple[int, int, int, int], seed: int
            ) -> dict[str, Any]:
    """One dtype and horizon on ``device``: the differences above (module docstring)."""
    g = torch.Generator().manual_seed(mix_seed("attention-check", seed, dtype, horizon))
    base = [torch.randn(*shape, generator=g, dtype=torch.float64) for _ in range(4)]  # q, k, v, upstream grad

    def leaves(dt: torch.dtype, dev: torch.device) -> list[torch.Tensor]:
        return [t.to(dev, dt).requires_grad_(i < 3) for i, t in enumerate(base)]

    on_device = _run_forms(*leaves(DTYPES[dtype], device), horizon)
    truth = _run_forms(*leaves(torch.float64, torch.device("cpu")), horizon)["reference"]
    tol = TOLERANCE[dtype]
    fast_vs_ref = _diff(on_device["fast"], on_device["reference"], tol)
    fast_vs_truth = _diff(on_device["fast"], truth, tol)
    return {"dtype": dtype, "horizon": horizon, "tolerance": tol, "fast_vs_reference": fast_vs_ref,
            "fast_vs_float64": fast_vs_truth, "reference_vs_float64": _diff(on_device["reference"], truth, tol),
            "forward_vs_vanilla": {
                "max_abs": (on_device["fast"][0] - on_device["vanilla"][0]).abs().max().item(),
                "bit_identical": bool(torch.equal(on_device["fast"][0], on_device["vanilla"][0]))},
            "passed": fast_vs_ref["within_tolerance"] and fast_vs_truth["within_tolerance"]}


def run(cfg: AttentionCheckConfig, resume: str | None = None) -> dict[str, Any]:
    device = pick_device(cfg.run.device, "--run.device")
    out = Run.create(cfg.run.out_dir, cfg.run.name, cfg).start()
    shape = (cfg.batch, cfg.heads, cfg.seq_len, cfg.head_dim)
    rows = []
    for dtype in cfg.dtypes:
        for horizon in cfg.horizons:
            r = compare(device, dtype, horizon, shape, cfg.run.seed)
            rows.append(r)
            print(f"{dtype} horizon {horizon}: fast vs reference forward {r['fast_vs_reference']['forward']:.2e}, "
                  f"grads {max(r['fast_vs_reference'][k] for k in ('grad_q', 'grad_k', 'grad_v')):.2e} "
                  f"(tolerance {r['tolerance']:g}); forward bit-identical to vanilla: "
                  f"{r['forward_vs_vanilla']['bit_identical']}; {'ok' if r['passed'] else 'FAILED'}", flush=True)
    results = {"device": str(device), "device_name": torch.cuda.get_device_name(device) if device.type == "cuda"
               else "cpu", "shape": list(shape), "tolerance": TOLERANCE, "grad_atol_factor": GRAD_ATOL_FACTOR,
               "checks": rows, "passed": all(r["passed"] for r in rows),
               "forward_bit_identical_to_vanilla": all(r["forward_vs_vanilla"]["bit_identical"] for r in rows)}
    out.write_results(results)
    return results
