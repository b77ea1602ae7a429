"""Generation engines behind ``--engine hf|vllm|vllm-server``, behind one seam (``base``).

``hf`` is our transformers decoder (``decoding.tandem.TandemDecoder``, opened by ``hf``): the
CPU default and the reference every other engine is tested against. ``vllm`` runs the same
schedules inside stock vLLM through a plugin (``vllm_model``: a model class holding vLLM's own
senior and junior; ``vllm_logits``: a V1 logits processor that replays each request's
schedule), never a fork (``vllm_rollouts`` opens it). ``vllm-server`` sends the requests to a
running ``tandem serve`` (``server_client``; ``serve`` starts one; ``server_rollouts`` opens
it and pushes weights through ``weight_sync``). Every engine is a ``base.RolloutEngine`` named
in one registry table (``base.ENGINES``), so everything downstream of a rollout is engine-blind.
"""

from .base import ENGINES, EngineSetup, RolloutEngine, RolloutSpec, check_vllm_schedule, engine_kind, open_engine  # noqa: F401


def open_decoder(engine: str, setup: EngineSetup, spec: RolloutSpec):
    """(decoder, tokenizer, close) for ``spec`` (schedule, sampling, p, K) on engine ``engine`` (an
    ``ENGINES`` name) opened with ``setup`` (an evaluation passes ``cfg.decoding.engine``,
    ``cfg.engine_setup`` and ``cfg.rollout_spec``).

    ``decoder`` has ``schedule`` and ``generate(prompts, seeds) -> Rollout``; ``close()`` frees the
    engine. The junior (``setup.junior``, default the senior's checkpoint) is not loaded for the solo
    schedule ``senior``.
    """
    from dataclasses import replace

    kind = engine_kind(engine)
    kind.check_schedule(spec.schedule)
    junior = None if spec.schedule == "senior" else (setup.junior or setup.senior)
    eng = kind.open(replace(setup, junior=junior))
    return eng.decoder(spec), eng.tokenizer, eng.close
