"""Text-level handoff turns on ``--engine vllm``: one stock vLLM engine per model.

What: ``VLLMTurnModel`` is the vLLM form of ``text_handoff.TurnModel``; ``TextHandoff`` (the
chains, their seeds, caps, budget and round limit, the saved rows) is the same object on
both engines.

How: each model gets its own plain ``VLLMEngine`` (no junior, no tandem plugin: a text-level
turn is solo decoding). A turn is one ``LLM.generate`` call over every live chain whose
author the model is, each request with its own ``max_tokens`` (the chain's cap), its own
``seed`` (the turn seed, ``row_seed(chain seed, turn)``, as on hf) and ``stop=["\\n\\n"]``
with ``include_stop_str_in_output``. The turn's text and end are then derived from the
generated ids by ``turns.turn_result``, exactly as on hf; vLLM's stop string only
decides where generation stops. Log-probs are vLLM's processed ones (after temperature,
``engines.vllm_engine``), the same quantity the hf decoder records.

Greedy turns equal the hf path's token for token (tests/test_text_handoff_vllm.py); sampled
turns differ from hf's (vLLM's seeded sampler is not our inverse-CDF draw) but a fixed seed
reproduces them, so a resumed run writes the same rows.

Memory: two engines share the device. On GPU each takes half of
``--vllm-gpu-memory-utilization`` (vLLM checks that much is free when an engine starts); on CPU
each gets its own ``--vllm-kv-cache-gib`` (default 1 GiB each).
"""

from __future__ import annotations

from dataclasses import replace

from ...errors import TandemError
from ...prompting import resolve_template
from .turns import BREAK, TurnEngine, turn_result


class VLLMTurnModel(TurnEngine):
    """One model of the pair on its own vLLM engine (``path``: its checkpoint directory)."""

    def __init__(self, path: str, tokenizer, sampling, template: str, settings, seed: int = 0):
        from ...engines.vllm_engine import VLLMEngine, model_eos_ids

        self.tokenizer, self.template, self.sampling = tokenizer, resolve_template(tokenizer, template), sampling
        self.engine = VLLMEngine(path, None, tokenizer, model_eos_ids(tokenizer, path), tandem=False, seed=seed,
                                 settings=settings)
        self.context = self.engine.max_model_len

    def _params(self, seed: int, cap: int):
        from vllm import SamplingParams as VSP

        s = self.sampling
        return VSP(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, max_tokens=cap, seed=int(seed),
                   logprobs=0, stop_token_ids=self.engine.eos_ids, stop=[BREAK], include_stop_str_in_output=True)

    def turns(self, prompts: list[list[int]], seeds: list[int], caps: list[int]) -> list[tuple[str, int, str, float]]:
        """One turn of each row (``TurnEngine.turns``), all rows in one ``generate`` call."""
        from vllm.inputs import TokensPrompt

        outs = self.engine.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
                                        [self._params(s, c) for s, c in zip(seeds, caps)], use_tqdm=False)
        result = []
        for o in outs:
            c = o.outputs[0]
            toks = list(c.token_ids)
            lp = sum(float(d[t].logprob) for d, t in zip(c.logprobs, toks))
            # finish "stop" is EOS (a stop token) or the paragraph break (stop_reason == BREAK)
            eos = c.finish_reason == "stop" and c.stop_reason != BREAK
            result.append(turn_result(self.tokenizer, toks, eos, lp))
        return result

    def close(self) -> None:
        self.engine.close()


def open_vllm_turn_models(cfg, juniors: list[str]) -> list[VLLMTurnModel]:
    """[senior, *juniors] turn models of an ``EvalConfig`` on ``--engine vllm``, one engine each (a pool:
    one per junior)."""
    from ...engines.vllm_engine import VLLMSettings, platform_is_cpu, require_vllm, with_dtype
    from ...models import load_tokenizer, resolve_model_path

    if cfg.models.junior_device not in (None, "", cfg.models.device):
        raise TandemError("--junior-device is not supported by --engine vllm (both engines share the device)")
    require_vllm()
    settings = with_dtype(cfg.decoding.vllm_settings or VLLMSettings(), cfg.models.dtype, cfg.models.device)
    if not platform_is_cpu():  # engines on one GPU: each may take its share of what one would
        settings = replace(settings, gpu_memory_utilization=settings.gpu_memory_utilization / (1 + len(juniors)))
    models: list[VLLMTurnModel] = []
    try:
        for spec in (cfg.models.senior, *juniors):
            models.append(VLLMTurnModel(resolve_model_path(spec), load_tokenizer(spec), cfg.decoding.sampling, cfg.problems.template,
                                        settings, seed=cfg.decoding.seed))
    except BaseException:
        for m in models:
            m.close()
        raise
    return models
