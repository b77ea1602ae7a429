"""``rl.sharding``: an FSDP2 run with bf16 compute reduces its gradients in fp32 (docs/sharding.md,
"What the run does differently": ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``).

Why it matters: bf16 keeps 8 significant bits, so a sum of two ranks' gradients 1 and 2^-9 is 1 in
bf16 (the ulp at 1 is 2^-7) and 1 + 2^-9 in fp32; at lr 1e-6 such small parts are the update.

The first test reads the policy out of the run's own set-up (``grpo_args`` then the sharding step, as
``rl.assemble.build_run`` does) and out of the accelerate plugin built from it. The second puts that
very policy on a two-rank FSDP2 model (gloo, CPU, two forked processes; under a second) whose
ranks get gradients 1 and 2^-9 on every weight: the mean kept is (1 + 2^-9) / 2 = 0.5 + 2^-10 exactly
(fp32 holds it), where a bf16 reduction leaves 0.5.
"""

import time

import pytest
import torch

SMALL = 2.0 ** -9  # bf16-exact alone, lost when added to 1 in bf16
RANK_GRADS = (1.0, SMALL)


def _run_policy():
    """The FSDP2 mixed-precision policy a bf16 ``--sharding fsdp2`` run gives its Trainer."""
    from tandem_rlvr.config import load_train_config
    from tandem_rlvr.rl.sharding import configure
    from tandem_rlvr.rl.trl_args import grpo_args

    cfg = load_train_config(overrides={"sharding": "fsdp2", "dtype": "bfloat16"})
    args = grpo_args(cfg, 2, on_cpu=True)
    configure(args, cfg.models.precision.compute, on_cpu=False)  # on_cpu=False: leave accelerate's state alone
    return args


def test_a_bf16_fsdp2_run_computes_in_bf16_and_reduces_in_fp32():
    from accelerate.utils import FullyShardedDataParallelPlugin

    args = _run_policy()
    policy = args.fsdp_plugin_args["mixed_precision_policy"]
    assert (policy.param_dtype, policy.reduce_dtype) == (torch.bfloat16, torch.float32)
    assert not args.bf16 and not args.fp16  # no autocast on top of the policy
    plugin = FullyShardedDataParallelPlugin(**args.fsdp_plugin_args)  # what the Trainer's Accelerator holds
    assert plugin.mixed_precision_policy.reduce_dtype == torch.float32
    assert plugin.mixed_precision_policy.param_dtype == torch.bfloat16


def _reduce_worker(rank: int, world: int, rdzv: str, policy, out: str) -> None:
    """One rank: a 4 x 4 linear layer sharded by FSDP2 under ``policy``; loss = sum of its outputs on
    a row of ``RANK_GRADS[rank]``, so d loss / d W[i, j] = that value on every weight."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    torch.set_num_threads(1)  # a forked child: no OpenMP pool of its own
    dist.init_process_group("gloo", init_method=rdzv, rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 4, bias=False))
        fully_shard(model, mp_policy=policy)
        x = torch.full((1, 4), RANK_GRADS[rank])
        model(x).float().sum().backward()
        grad = model[0].weight.grad
        torch.save({"dtype": str(grad.dtype), "full": grad.full_tensor().float()}, f"{out}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_two_fsdp2_ranks_keep_a_gradient_too_small_for_bf16(tmp_path):
    import torch.multiprocessing as mp

    policy = _run_policy().fsdp_plugin_args["mixed_precision_policy"]
    rdzv = f"file://{tmp_path / 'rdzv'}"
    # fork, not spawn: the children need not import torch again (0.5 s against 7-19 s on a busy 2-core machine)
    procs = mp.start_processes(_reduce_worker, args=(2, rdzv, policy, str(tmp_path)), nprocs=2, join=False,
                               start_method="fork")
    deadline = time.monotonic() + 120
    while not procs.join(timeout=1):
        if time.monotonic() > deadline:
            for p in procs.processes:
                p.kill()
            pytest.fail("the two ranks did not finish in 120 s")
    want = (1.0 + SMALL) / 2  # FSDP2 averages over ranks: 0.5 + 2^-10, exact in fp32
    assert want == 0.5 + 2.0 ** -10 and torch.tensor(want, dtype=torch.bfloat16).item() == 0.5  # bf16 would lose it
    for rank in range(2):
        got = torch.load(tmp_path / f"rank{rank}.pt")
        assert got["dtype"] == "torch.float32"  # the fp32 master's gradient
        assert torch.equal(got["full"], torch.full((4, 4), want)), (rank, got["full"])
