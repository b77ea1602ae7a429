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

from dataclasses import dataclass

from .base import ENGINES, EngineSetup, RolloutEngine, RolloutSpec, check_vllm_schedule, engine_kind, open_engine  # noqa: F401
from .request_args import NOT_ON_VLLM  # noqa: F401  (re-exported: checked before any loading)


@dataclass(frozen=True)
class DecoderSetup:
    """What opening a decoder needs; ``config.EvalConfig`` carries the same fields, so an
    evaluation passes its config itself. ``junior`` None = the senior's checkpoint."""

    senior: str
    junior: str | None = None
    sampling: object = None  # decoding.sampling.SamplingParams
    engine: str = "hf"
    p: float = 0.5
    K: int = 32
    device: str | None = "auto"
    junior_device: str | None = None
    dtype: str | None = "auto"
    seed: int = 0
    vllm_settings: object = None  # engines.vllm_engine.VLLMSettings
    server: object = None  # engines.server_client.ServerSettings (engine vllm-server)


def open_decoder(setup, schedule: str):
    """(decoder, tokenizer, close) for ``schedule`` on ``setup.engine`` (a ``DecoderSetup`` or
    anything with its fields, e.g. an ``EvalConfig``).

    ``decoder`` has ``schedule`` and ``generate(prompts, seeds) -> Rollout``; ``close()``
    frees the engine. The junior is not loaded for the solo schedule ``senior``.
    """
    kind = engine_kind(setup.engine)
    kind.check_schedule(schedule)
    junior = None if schedule == "senior" else (setup.junior or setup.senior)
    eng = kind.open(EngineSetup(setup.senior, junior, setup.device, setup.junior_device, setup.dtype, setup.seed,
                                setup.vllm_settings, getattr(setup, "server", None)))
    return eng.decoder(RolloutSpec(schedule, setup.sampling, setup.p, setup.K)), eng.tokenizer, eng.close
