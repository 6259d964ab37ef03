"""What only a GPU can check, waiting in the suite: each test is skipped without CUDA (``pytest -m gpu`` on a GPU
machine runs them). The myopic attention's CUDA branch calls a private fused kernel that has never run on the CPU
machines the suite lives on; a bf16 training step and DDP over two GPUs (NCCL) are the paths the docs mark as not
yet run on a GPU."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from forethought.cli import main
from forethought.myopia.attention import myopic_attention, reference_myopic_attention, vanilla_attention

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# bf16 keeps 8 bits of mantissa: the fused and the explicit form round differently.
TOL = {torch.float32: 2e-5, torch.bfloat16: 3e-2}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_myopic_attention_on_cuda_equals_the_reference_form(dtype):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(2, 4, 33, 16, device="cuda", dtype=dtype, generator=g).requires_grad_()
               for _ in range(3))
    w = torch.randn(2, 4, 33, 16, device="cuda", dtype=dtype, generator=g)
    outs, grads = [], []
    for fn in (lambda: myopic_attention(q, k, v, k.detach(), v.detach()),
               lambda: reference_myopic_attention(q, k, v, k.detach(), v.detach()),
               lambda: vanilla_attention(q, k, v)):
        o = fn()
        outs.append(o.detach().float())
        grads.append([x.float() for x in torch.autograd.grad((o * w).sum(), (q, k, v))])
    tol = TOL[dtype]
    torch.testing.assert_close(outs[0], outs[2], rtol=tol, atol=tol)  # the forward is vanilla attention's
    torch.testing.assert_close(outs[0], outs[1], rtol=tol, atol=tol)
    for a, b in zip(grads[0], grads[1], strict=True):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol * 10)
    assert (grads[0][1] - grads[2][1]).abs().max() > 10 * tol  # k's gradient differs from vanilla's


def test_attention_check_on_cuda_passes(tmp_path):
    # forethought myopia attention-check (gpu_check's part 5): the fast form against the explicit form and float64,
    # fp32 and bf16, horizons 0 and 3, at the tolerances of attention_check.TOLERANCE
    assert main(["myopia", "attention-check", "--run.device", "cuda", "--run.out_dir", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "myopia-attention-check" / "results.json").read_text())
    assert res["passed"], [c for c in res["checks"] if not c["passed"]]
    assert {(c["dtype"], c["horizon"]) for c in res["checks"]} == {(d, h) for d in ("fp32", "bf16") for h in (0, 3)}


def _synthetic(out: Path, name: str, *more: str) -> list[str]:
    return ["myopia", "synthetic", "--config", "tiny", "--modes", "[vanilla,detach_hidden]", "--train.steps", "20",
            "--train.batch_size", "16", "--train.log_every", "5", "--eval_sequences", "64",
            "--probe.train_sequences", "32", "--probe.test_sequences", "16", "--run.device", "cuda",
            "--run.out_dir", str(out), "--run.name", name, *more]


def test_bf16_training_step_on_cuda(tmp_path):
    assert main(_synthetic(tmp_path, "bf16", "--run.precision", "bf16")) == 0
    for mode in ("vanilla", "detach_hidden"):
        res = json.loads((tmp_path / "bf16" / "p=1" / mode / "results.json").read_text())
        losses = [loss for _, loss in res["curve"]]
        assert losses and all(loss == loss and abs(loss) < 1e6 for loss in losses)  # finite


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_two_gpu_ddp_matches_one_gpu(tmp_path):
    assert main(_synthetic(tmp_path, "one")) == 0
    torchrun = Path(sys.executable).parent / "torchrun"
    two = subprocess.run([str(torchrun), "--nproc-per-node", "2", "--master-port", "29561", "-m", "forethought.cli",
                          *_synthetic(tmp_path, "two")], capture_output=True, text=True, timeout=600)
    assert two.returncode == 0, two.stderr[-2000:]
    res = [json.loads((tmp_path / n / "p=1" / "vanilla" / "results.json").read_text()) for n in ("one", "two")]
    assert res[0]["world_size"] == 1 and res[1]["world_size"] == 2
    # Same global batch, gradients averaged by DDP over NCCL: equal up to float32 reduction order.
    diffs = [abs(a - b) for (_, a), (_, b) in zip(res[0]["curve"], res[1]["curve"], strict=True)]
    assert len(diffs) == 4 and max(diffs) < 1e-3
