"""Generation engines behind ``--engine hf|vllm|vllm-server``.

``hf`` is our transformers decoder (``decoding.tandem.TandemDecoder``): the CPU default and
the reference every other engine is tested against. ``vllm`` runs the same schedules inside
stock vLLM through a plugin (``vllm_model``: a model class holding vLLM's own senior and
junior; ``vllm_logits``: a V1 logits processor that replays each request's schedule), never
a fork. ``vllm-server`` sends the requests to a running ``tandem serve`` (``server_client``;
``serve`` starts one). All engines expose ``schedule`` and ``generate(prompts, seeds) -> Rollout``,
so everything downstream of a rollout is engine-blind.
"""

from dataclasses import dataclass

from .request_args import NOT_ON_VLLM  # noqa: F401  (re-exported: checked before any loading)

ENGINES = ("hf", "vllm", "vllm-server")


def check_vllm_schedule(schedule: str) -> None:
    """TandemError unless the vLLM engine can run ``schedule`` (checked before any loading)."""
    if schedule in NOT_ON_VLLM:
        from ..errors import TandemError

        raise TandemError(f"schedule {schedule!r} is not available on the vLLM engine (use engine hf)")


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
    from ..errors import TandemError

    engine, senior, sampling, p, K = setup.engine, setup.senior, setup.sampling, setup.p, setup.K
    device, junior_device, dtype, seed = setup.device, setup.junior_device, setup.dtype, setup.seed
    junior = setup.junior or senior
    if engine not in ENGINES:
        raise TandemError(f"unknown engine {engine!r}; valid: {', '.join(ENGINES)}")
    if schedule == "senior":
        junior = None
    if engine != "hf":
        check_vllm_schedule(schedule)
    if engine == "vllm-server":
        from .server_client import open_server_decoder

        if getattr(setup, "server", None) is None:
            raise TandemError("engine vllm-server needs a server: --server URL")
        dec, tok, close, root = open_server_decoder(setup.server, schedule, sampling, p=p, K=K)
        dec.models = {"senior": root, "junior": None if schedule == "senior" else "served"}  # run records
        return dec, tok, close
    if engine == "hf":
        from ..models import load_pair

        pair = load_pair(senior, junior, device, junior_device, dtype)
        return pair.decoder(schedule, sampling, p=p, K=K), pair.tokenizer, lambda: None

    from ..models import check_same_tokenizer, load_tokenizer, resolve_model_path
    from .vllm_engine import VLLMEngine, VLLMSettings, model_eos_ids, with_dtype

    if junior_device not in (None, "", device):
        raise TandemError("--junior-device is not supported by --engine vllm (both models share the engine's devices; "
                          "use --vllm-tensor-parallel-size to spread them)")
    settings = with_dtype(setup.vllm_settings or VLLMSettings(), dtype, device)
    tok = load_tokenizer(senior)
    s_path = resolve_model_path(senior)
    j_path = resolve_model_path(junior) if junior is not None else None
    if junior is not None:
        check_same_tokenizer(tok, load_tokenizer(junior))
    eng = VLLMEngine(s_path, j_path, tok, model_eos_ids(tok, s_path), tandem=junior is not None, seed=seed,
                     settings=settings)
    return eng.decoder(schedule, sampling, p=p, K=K), tok, eng.close
