"""Sharded training (FSDP2 and DeepSpeed ZeRO-3 through accelerate) on CPU: two gloo processes under
torchrun against one.

Every run here really shards: each process reports the share of every parameter it holds
(``tests/distributed/sharded_entry.py``), and the tests assert it is 1/2 (accelerate would otherwise run DDP
on a CPU machine without a word, and the equalities below would test nothing; under ZeRO-3 the
parameters below DeepSpeed's persistence threshold, 10 x hidden elements, stay whole). Models: random
two-layer Qwen3s of ``conftest.make_model`` (every dimension even, so FSDP2's row shards split
exactly in two); reward: spaces per completion (a learning signal without a trained model).

Tolerances: losses and step metrics rel 1e-5 (the two layouts sum the same gradients in another
order); weights after the updates within 1e-4 absolute at lr 1e-2 (AdamW divides by the root of
the second moment, which magnifies rounding on near-zero gradients: measured 7.8e-6 under FSDP2).

LoRA under FSDP2 and under ZeRO-3 (PEFT adapters on the sharded senior) is checked the same way, and against the
initial senior on disk (only the adapters may change) and the merged weights worked out by hand.

Run: ``python -m pytest -m slow tests/distributed/test_sharded_training.py``.
"""

import json
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tandem_rlvr.engines.server_rollouts import free_port

from conftest import save_training_inputs
from helpers.sharded import (ENTRY, REWARD, assert_lora_partitioned, assert_partitioned, assert_same_updates,
                             assert_sharded, kill_resume_and_compare, max_diff, rank_records, run_ok,
                             signal_all, start_nodes, stop_nodes, torchrun, train_flags, train_here, update_rows,
                             wait_for)

pytestmark = pytest.mark.slow
HIDDEN = 32  # conftest.save_training_inputs' default width


@pytest.fixture(scope="module")
def world(tmp_path_factory, tok):
    root = tmp_path_factory.mktemp("sharded")
    save_training_inputs(root, tok, layers=2)
    (root / "reward.py").write_text(REWARD)
    return root


@pytest.fixture(scope="module")
def baseline(world):
    """One process, no sharding, four updates (checkpoints at 2 and 4)."""
    out = world / "one"
    train_here(*train_flags(world, out, 4))
    return out


def _entry(world, run: Path, flags: list[str], **env) -> tuple[Path, list[dict]]:
    """A 2-process run of 2 updates through ``sharded_entry.py``; (its run dir, the rank reports)."""
    out = run.with_name(run.name + "-ranks")
    out.mkdir()
    run_ok(torchrun(ENTRY, str(out), *train_flags(world, run, 2, *flags)), **env)
    return run, rank_records(out)


LORA = ("--lora-r", "4", "--lora-alpha", "8", "--save-merged", "true")  # scaling alpha / r = 2


@pytest.fixture(scope="module")
def lora_one(world):
    """One process, no sharding, LoRA, four updates (checkpoints at 2 and 4; the learning rate is constant, so
    its first two updates and checkpoint-2's adapter are a two-update run's)."""
    out = world / "lora-one"
    train_here(*train_flags(world, out, 4, *LORA))
    return out


def test_two_process_fsdp2_lora_trains_like_one_process_and_only_the_adapters_change(world, lora_one, tmp_path):
    """PEFT adapters on an FSDP2-sharded senior: the base and the adapters are split in half, the
    updates and the final adapter are the one-process run's, every weight but the adapters' stays
    the senior on disk bit for bit, every process's rollout copy is the gathered base + (alpha / r) B A
    by hand, and final/merged holds that sum, worked out here from final/'s adapter in plain torch."""
    run, ranks = _entry(world, tmp_path / "lora", ["--sharding", "fsdp2", *LORA])
    assert_sharded(ranks)
    assert any(".lora_A." in n for n in ranks[0]["fractions"])  # the adapters are shards too
    _lora_like_one_process(world, lora_one, run, ranks, one_save="checkpoint-2")  # the adapter after update 2


def test_two_process_zero3_lora_killed_and_resumed_trains_like_one_process_and_only_the_adapters_change(
        world, lora_one, tmp_path):
    """PEFT adapters on a ZeRO-3-partitioned senior, a 2-process run of 4 updates killed once checkpoint-2
    is complete and re-run (one run answers both questions, issue 32's CI time): it resumes from
    DeepSpeed's partitions of the adapters' masters and moments; every base matrix is split in halves
    (the adapters, 128 elements each, are under DeepSpeed's persistence threshold of 10 x hidden = 320
    and stay whole as DeepSpeed keeps such parameters); then the same as under FSDP2: an uninterrupted
    1-process LoRA run's updates 1-4 and final adapter, the base unchanged bit for bit, every rollout copy
    the gathered base + (alpha / r) B A by hand, final/merged that sum from final/'s adapter; and the
    checkpoint is DeepSpeed's partitions."""
    run = tmp_path / "z3lora"
    ranks = kill_resume_and_compare(world, lora_one, run, "zero3", *LORA, file="adapter_model.safetensors",
                                    ranks=tmp_path / "ranks")
    assert_lora_partitioned(ranks, HIDDEN, 2 * 2 * 7)  # A and B of the seven linear layers of both decoder layers
    # the resumed run's copy syncs: the restored senior, update 3, update 4 (as a 2-update run's: first, 1, 2);
    # checkpoint-2's merged/ may be the killed run's unfinished work, so the saves checked are the resumed run's
    _lora_like_one_process(world, lora_one, run, ranks, saves=("checkpoint-4", "best"))
    assert sorted(p.name for p in (run / "checkpoint-2" / "global_step2").glob("zero_pp_rank_*_optim_states.pt")) == \
        ["zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt"]


def _lora_like_one_process(world, one, run, ranks, one_save="final", saves=("checkpoint-2", "best")):
    """``run``'s updates 1-2 are the one-process LoRA run ``one``'s and its final/ adapter is ``one/one_save``'s."""
    assert [r["summary"]["processes"] for r in ranks] == [2, 2]
    assert_same_updates(update_rows(one), update_rows(run), (1, 2))
    adapter = load_file(run / "final" / "adapter_model.safetensors")
    assert max_diff(load_file(one / one_save / "adapter_model.safetensors"), adapter) < 1e-4
    assert all(r["base_unchanged"] and r["copy_equal"] for r in ranks)
    assert all(r["copy_syncs"] == 3 for r in ranks)
    base = load_file(world / "senior" / "model.safetensors")
    merged = load_file(run / "final" / "merged" / "model.safetensors")
    assert sorted(merged) == sorted(base)
    moved = 0
    for name in base:
        owner = name.removesuffix(".weight")
        a = adapter.get(f"base_model.model.{owner}.lora_A.weight")  # (r, in)
        b = None if a is None else adapter[f"base_model.model.{owner}.lora_B.weight"]
        expect = base[name] if a is None else base[name] + 2.0 * (b @ a)
        torch.testing.assert_close(merged[name], expect)
        moved += a is not None and not torch.equal(expect, base[name])
    assert moved == 2 * 7  # every linear layer of both decoder layers took its update
    for save in saves:  # collective saves of the adapter (and merged/) in each
        assert (run / save / "adapter_model.safetensors").is_file()
        assert (run / save / "merged" / "model.safetensors").is_file()


def _killed_two_processes_like_one(world, baseline, tmp_path, sharding: str) -> tuple[Path, list[dict]]:
    """A 2-process ``sharding`` run of 4 updates, killed once checkpoint-2 is complete and re-run (one run
    answers both questions, issue 32's CI time), against the 1-process baseline: it resumes at
    checkpoint-2 and gives the baseline's updates 1-4 and final/ (``kill_resume_and_compare``), its
    checkpoint-2 HF weights are the baseline's masters at step 2, and every process of the resumed run
    decoded with a copy refreshed by gathering; (run dir, the resumed run's rank reports)."""
    run = tmp_path / sharding
    ranks = kill_resume_and_compare(world, baseline, run, sharding, ranks=tmp_path / "ranks")
    _resumed_like_one_process(baseline, run, ranks)
    return run, ranks


def _resumed_like_one_process(baseline, run, ranks) -> None:
    """A resumed 2-process run against the 1-process baseline: its checkpoint-2 HF weights, written before the
    kill, are the baseline's masters at step 2, and every process decoded with a copy refreshed by gathering."""
    assert [r["summary"]["processes"] for r in ranks] == [2, 2]
    # checkpoint-2's HF weights (gathered, compute dtype = fp32 on CPU), written before the kill
    masters = load_file(baseline / "checkpoint-2" / "model.safetensors")
    assert max_diff(masters, load_file(run / "checkpoint-2" / "model.safetensors")) < 1e-4
    # the resumed run's syncs: the restored senior before rollout 3, the update-3 senior before
    # rollout 4, the update-4 senior before step 4's validation
    assert all(r["copy_equal"] for r in ranks) and all(r["copy_syncs"] == 3 for r in ranks)


def test_an_accelerate_fsdp_launch_in_bf16_shards_reduces_in_fp32_decodes_the_gathered_senior_and_keeps_the_klreg_junior_whole(  # noqa: E501
        world, tmp_path):
    """What ``accelerate launch --config_file`` exports for ``distributed_type: FSDP``, ``fsdp_version: 2``,
    ``mixed_precision: bf16`` (no --sharding flag), a bf16 KL-Reg run (one run answers both, as the ZeRO-3
    launch below does): bf16 shards over fp32 masters, gradients reduced in fp32, every process's rollout copy
    the gathered senior bit for bit (cast on the shard, then gathered), best/ and final/ loadable in the compute
    dtype; and KL-Reg's reference (ours is the junior) kept whole and frozen, where TRL would shard it in place
    (``prepare_fsdp``)."""
    run, ranks = _entry(world, tmp_path / "klreg", ["--method", "klreg", "--dtype", "bfloat16"],
                        ACCELERATE_USE_FSDP="true", FSDP_VERSION="2", ACCELERATE_MIXED_PRECISION="bf16")
    assert_sharded(ranks)
    assert json.loads((run / "config.json").read_text())["sharding"] == "fsdp2"
    assert all(r["copy_equal"] for r in ranks)  # bit for bit: cast on the shard, then gathered
    assert all(r["mixed_precision"] == {"param": "torch.bfloat16", "reduce": "torch.float32"} for r in ranks)
    assert all(r["master_dtype"] == "torch.float32" for r in ranks)
    for r in ranks:
        assert set(r["junior_fractions"].values()) == {1.0} and r["junior_unchanged"]
    assert update_rows(run)[2]["kl/beta_term"] > 0  # the junior was the reference of a real KL term
    from transformers import AutoModelForCausalLM

    for name in ("best", "final"):  # loadable, in the compute dtype
        m = AutoModelForCausalLM.from_pretrained(run / name)
        assert next(m.parameters()).dtype == torch.bfloat16


def test_two_fsdp2_nodes_on_loopback_one_stopped_error_after_the_timeout_and_the_rerun_resumes_to_the_one_process_run(  # noqa: E501
        world, baseline, tmp_path):
    """One FSDP2 run of 4 updates on two one-process "nodes" meeting at a loopback rendezvous (the multi-node
    recipe) answers three questions (CI time). Node 1 is stopped (SIGSTOP) once checkpoint-2 is complete: node 0,
    waiting in a collective, ends in an error after the run's --dist-timeout-s (20 s; the default, 1800 s, would
    outlast the wait), not a hang, and writes no summary. The same command again on both nodes resumes at
    checkpoint-2 (``_resumed_like_one_process``: the baseline's updates 1-4 and final/, checkpoint-2's HF weights
    the baseline's masters at step 2, every rollout copy refreshed by gathering), so two nodes shard (half of
    every parameter per process) and train like one process, and FSDP's per-rank shards lie beside the HF
    weights."""
    run, ranks = tmp_path / "fsdp2", tmp_path / "ranks"
    ranks.mkdir()
    args = (ENTRY, str(ranks), *train_flags(world, run, 4, "--sharding", "fsdp2", "--dist-timeout-s", "20"))
    (tmp_path / "stopped").mkdir()
    nodes = start_nodes(free_port(), tmp_path / "stopped", *args)
    try:
        wait_for(run / "checkpoint-2" / "model.safetensors", nodes)  # written last, once every rank saved
        signal_all(nodes[1].pid, signal.SIGSTOP)  # node 1 stops answering; node 0 waits in a collective
        assert nodes[0].wait(timeout=900) != 0
        assert not (run / "summary.json").exists()
    finally:
        stop_nodes(nodes)
    (tmp_path / "rerun").mkdir()
    nodes = start_nodes(free_port(), tmp_path / "rerun", *args)
    for r, node in enumerate(nodes):
        assert node.wait(timeout=1800) == 0, (tmp_path / "rerun" / f"node{r}.err").read_text()[-3000:]
    assert "resuming from checkpoint-2" in (tmp_path / "rerun" / "node0.out").read_text()
    assert_same_updates(update_rows(baseline), update_rows(run), (1, 2, 3, 4))
    final = [load_file(r / "final" / "model.safetensors") for r in (baseline, run)]
    assert max_diff(*final) < 1e-4
    assert json.loads((run / "summary.json").read_text())["steps"] == 4
    ranks = rank_records(ranks)
    _resumed_like_one_process(baseline, run, ranks)
    assert_sharded(ranks)
    assert (run / "checkpoint-2" / "pytorch_model_fsdp_0").is_dir()  # FSDP's per-rank shards beside the HF weights


def test_two_process_zero3_killed_and_resumed_loads_into_partitions_and_gives_the_one_process_losses_metrics_and_weights(  # noqa: E501
        world, baseline, tmp_path):
    run, ranks = _killed_two_processes_like_one(world, baseline, tmp_path, "zero3")
    assert_partitioned(ranks, HIDDEN)
    assert all(r["loaded_partitioned"] for r in ranks)  # zero.Init: never whole, even before DeepSpeed's engine
    # DeepSpeed's per-rank partitions beside the HF weights of the masters
    assert sorted(p.name for p in (run / "checkpoint-2" / "global_step2").glob("zero_pp_rank_*_optim_states.pt")) == \
        ["zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt"]
    assert all(set(r["junior_fractions"].values()) == {1.0} and r["junior_unchanged"] for r in ranks)


def test_an_accelerate_zero3_launch_in_bf16_reduces_in_fp32_decodes_the_gathered_senior_and_keeps_the_junior_whole(
        world, tmp_path):
    """What ``accelerate launch --config_file`` exports for ``distributed_type: DEEPSPEED``,
    ``zero_stage: 3`` (no --sharding flag), a bf16 KL-Reg run: bf16 partitions over fp32 masters,
    gradients reduce-scattered in fp32, the hf copy equal to the fp32 masters gathered and cast to
    bf16, and KL-Reg's reference (the junior) never handed to DeepSpeed (TRL would partition it)."""
    run, ranks = _entry(world, tmp_path / "z3launch", ["--method", "klreg", "--dtype", "bfloat16"],
                        ACCELERATE_USE_DEEPSPEED="true", ACCELERATE_DEEPSPEED_ZERO_STAGE="3",
                        ACCELERATE_MIXED_PRECISION="bf16")
    assert_partitioned(ranks, HIDDEN)
    assert json.loads((run / "config.json").read_text())["sharding"] == "zero3"
    assert all(r["mixed_precision"] == {"param": "torch.bfloat16", "reduce": "torch.float32"} for r in ranks)
    assert all(r["master_dtype"] == "torch.float32" for r in ranks)
    assert all(r["copy_equal"] for r in ranks)
    for r in ranks:
        assert set(r["junior_fractions"].values()) == {1.0} and r["junior_unchanged"]
    assert update_rows(run)[2]["kl/beta_term"] > 0
    from transformers import AutoModelForCausalLM

    for name in ("best", "final"):  # loadable, in the compute dtype
        m = AutoModelForCausalLM.from_pretrained(run / name)
        assert next(m.parameters()).dtype == torch.bfloat16
