"""Text-level handoff turns on ``--engine vllm``: one stock vLLM engine per model, or one tandem engine for a pool.

What: ``VLLMTurnModel`` is the vLLM form of ``text_handoff.TurnModel``; ``TextHandoff`` (the
chains, their seeds, caps, budget and round limit, the saved rows) is the same object on
both engines.

How: with one junior (or a pool whose juniors do not all share the senior's tokenizer) each model
gets its own plain ``VLLMEngine`` (no junior, no tandem plugin: a text-level turn is solo decoding).
A junior pool of the senior's tokenizer runs on **one** tandem engine whose model holds the senior
and every junior (``engines.vllm_model``, as training's pool engine): each model is a view of it,
and each turn request names its writer in ``extra_args["tandem"]`` (schedule ``senior``, or
``junior`` with the junior's index), so the logits processor hands the turn that model's logits.
A turn is one ``LLM.generate`` call over every live chain whose author the model is, each request
with its own ``max_tokens`` (the chain's cap), its own ``seed`` (the turn seed,
``row_seed(chain seed, turn)``, as on hf), the model's own EOS ids and ``stop=["\\n\\n"]`` with
``include_stop_str_in_output``. The turn's text and end are then derived from the generated ids by
``turns.turn_result``, exactly as on hf; vLLM's stop string only decides where generation stops.
Log-probs are vLLM's processed ones (after temperature, ``engines.vllm_engine``; on the tandem
engine the writer's), the same quantity the hf decoder records.

Greedy turns equal the hf path's token for token (tests/distributed/test_text_handoff_vllm.py, and for a pool
tests/distributed/test_vllm_pool.py); sampled turns differ from hf's (vLLM's seeded sampler is not our
inverse-CDF draw) but a fixed seed reproduces them, so a resumed run writes the same rows.

Why one engine for a pool: N + 1 engines would each hold a KV cache and a share of the device
(``--vllm-gpu-memory-utilization`` split N + 1 ways) and vLLM's in-process engines are not built to
share a process many at a time; the cost is compute, since every token of every turn runs the
senior's and every junior's body (the tandem model fills each model's KV cache for every request),
1 + N bodies per token against 1 (docs/pool.md, "vLLM engines").

Memory: with one engine per model, the engines share the device. On GPU each takes its share of
``--vllm-gpu-memory-utilization`` (vLLM checks that much is free when an engine starts); on CPU
each gets its own ``--vllm-kv-cache-gib`` (default 1 GiB each). The pool's one engine takes the
whole share.
"""

from __future__ import annotations

from dataclasses import replace

from ...errors import TandemError
from ...prompting import resolve_template
from .turns import BREAK, TurnEngine, turn_result


class VLLMTurnModel(TurnEngine):
    """One model of the pair on a vLLM engine: its own stock engine (``open``), or a view of a tandem engine
    holding the pool (``extra``: the turn requests' ``extra_args``, naming the writer; ``owns`` False)."""

    def __init__(self, engine, tokenizer, eos_ids, sampling, template: str, extra: dict | None = None,
                 owns: bool = True):
        self.engine, self.eos_ids, self.extra, self.owns = engine, sorted(set(int(e) for e in eos_ids)), extra, owns
        self.tokenizer, self.template, self.sampling = tokenizer, resolve_template(tokenizer, template), sampling
        self.context = engine.max_model_len

    @classmethod
    def open(cls, path: str, tokenizer, sampling, template: str, settings, seed: int = 0) -> "VLLMTurnModel":
        """The model at ``path`` (its checkpoint directory) on its own stock engine."""
        from ...engines.vllm_engine import VLLMEngine, model_eos_ids

        eos = model_eos_ids(tokenizer, path)
        return cls(VLLMEngine(path, None, tokenizer, eos, tandem=False, seed=seed, settings=settings), tokenizer, eos,
                   sampling, template)

    def _params(self, seed: int, cap: int):
        from vllm import SamplingParams as VSP

        s = self.sampling
        return VSP(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, max_tokens=cap, seed=int(seed),
                   logprobs=0, stop_token_ids=self.eos_ids, stop=[BREAK], include_stop_str_in_output=True,
                   extra_args=self.extra)

    def turns(self, prompts: list[list[int]], seeds: list[int], caps: list[int]) -> list[tuple[str, int, str, float]]:
        """One turn of each row (``TurnEngine.turns``), all rows in one ``generate`` call."""
        from vllm.inputs import TokensPrompt

        outs = self.engine.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
                                        [self._params(s, c) for s, c in zip(seeds, caps, strict=True)],
                                        use_tqdm=False)
        result = []
        for o in outs:
            c = o.outputs[0]
            toks = list(c.token_ids)
            lp = sum(float(d[t].logprob) for d, t in zip(c.logprobs, toks, strict=True))  # one entry per token
            # finish "stop" is EOS (a stop token) or the paragraph break (stop_reason == BREAK)
            eos = c.finish_reason == "stop" and c.stop_reason != BREAK
            result.append(turn_result(self.tokenizer, toks, eos, lp))
        return result

    def close(self) -> None:
        if self.owns:
            self.engine.close()


def open_vllm_turn_models(cfg, juniors: list[str]) -> list[VLLMTurnModel]:
    """[senior, *juniors] turn models of an ``EvalConfig`` on ``--engine vllm``: one stock engine each, or,
    for a pool whose juniors all share the senior's tokenizer, views of one tandem engine (module docstring)."""
    from ...engines.vllm_engine import VLLMSettings, platform_is_cpu, require_vllm, with_dtype
    from ...models import load_tokenizer, resolve_model_path

    if cfg.models.junior_device not in (None, "", cfg.models.device):
        raise TandemError("--junior-device is not supported by --engine vllm (both engines share the device)")
    require_vllm()
    settings = with_dtype(cfg.decoding.vllm_settings or VLLMSettings(), cfg.models.dtype, cfg.models.device)
    specs = (cfg.models.senior, *juniors)
    toks = [load_tokenizer(spec) for spec in specs]
    if len(juniors) > 1 and all(t.get_vocab() == toks[0].get_vocab() for t in toks[1:]):
        return _pool_turn_models(cfg, [resolve_model_path(spec) for spec in specs], toks, settings)
    if not platform_is_cpu():  # engines on one GPU: each may take its share of what one would
        settings = replace(settings, gpu_memory_utilization=settings.gpu_memory_utilization / (1 + len(juniors)))
    models: list[VLLMTurnModel] = []
    try:
        for spec, tok in zip(specs, toks, strict=True):
            models.append(VLLMTurnModel.open(resolve_model_path(spec), tok, cfg.decoding.sampling,
                                             cfg.problems.template, settings, seed=cfg.decoding.seed))
    except BaseException:
        for m in models:
            m.close()
        raise
    return models


def _pool_turn_models(cfg, paths: list[str], toks: list, settings) -> list[VLLMTurnModel]:
    """[senior, *juniors] views of one tandem engine holding the senior and every junior of ``paths[1:]``; the
    first view owns the engine (closing it closes the engine)."""
    from ...engines.vllm_engine import VLLMEngine, model_eos_ids

    eos = [model_eos_ids(tok, path) for tok, path in zip(toks, paths, strict=True)]
    engine = VLLMEngine(paths[0], paths[1:], toks[0], eos[0], tandem=True, seed=cfg.decoding.seed, settings=settings)
    writers = [{"schedule": "senior"}, *({"schedule": "junior", "junior": j} for j in range(len(paths) - 1))]
    return [VLLMTurnModel(engine, tok, e, cfg.decoding.sampling, cfg.problems.template, {"tandem": w}, owns=i == 0)
            for i, (tok, e, w) in enumerate(zip(toks, eos, writers, strict=True))]
