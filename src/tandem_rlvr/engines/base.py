"""The one engine seam: what every rollout engine does, and the registry table that names them.

A rollout engine (``hf``, ``vllm``, ``vllm-server``) is opened from settings (``EngineSetup``),
generates batches of rollouts in the rollout contract (``generate(prompts, seeds, spec) ->
decoding.tandem.Rollout``: tokens, senior mask, log-probs, lengths, finished), takes new senior
weights as a stream of ``(name, tensor)`` pairs (``load_weights``), and is closed. Training
(``rl/``) and evaluation (``eval/``, through ``engines.open_decoder``) both open their engine
here, so nothing above this floor asks which engine it holds: what differs between engines is a
field of their ``EngineKind`` in ``ENGINES``.

Weights: the trainer side makes the stream (``rl/weights.py``: the senior's named parameters,
each cast to ``engine.weight_dtype`` as it is reached) and calls ``load_weights`` once per
update. The stream is consumed one tensor at a time and never held whole, so a stream that
gathers sharded parameters bucket by bucket feeds every engine unchanged. Each call is one
complete update of the tensors it carries; calls may follow each other (buckets), and on the
vLLM engines each call is then its own layer-wise reload, so a call must carry whole modules
(all of a layer's tensors: vLLM processes a layer from what one reload gave it).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Iterable, Protocol, Sequence

if TYPE_CHECKING:
    import torch

    from ..decoding.tandem import Rollout


@dataclass(frozen=True)
class RolloutSpec:
    """What a batch of rollouts is drawn with: the handoff schedule (``decoding.schedule``
    name), its p and K, and the sampling (``decoding.sampling.SamplingParams``)."""

    schedule: str
    sampling: object
    p: float = 0.5
    K: int = 32


class RolloutEngine(Protocol):
    """An engine behind the seam (see the module docstring)."""

    name: str
    tokenizer: object
    weight_dtype: "torch.dtype | None"  # the dtype load_weights wants its tensors in (None: as the trainer holds them)

    def decoder(self, spec: RolloutSpec):
        """A decoder view (``schedule``, ``generate(prompts, seeds) -> Rollout``) for one spec."""

    def generate(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int], spec: RolloutSpec) -> "Rollout":
        """B rollouts: prompts are B token lists, seeds B row seeds (coins and sampler)."""

    def load_weights(self, weights: Iterable[tuple[str, "torch.Tensor"]]) -> None:
        """Take new senior weights: full tensors under the senior's transformers names, in order."""

    def sleep(self) -> None:
        """Free what the engine holds until its next call (vLLM sleep mode); others do nothing."""

    def close(self) -> None:
        """Free the engine."""


@dataclass(frozen=True)
class EngineSetup:
    """What opening an engine needs. An evaluation gives checkpoints and devices; a training run
    gives its loaded models too (``pair``: a ``models.Pair``, whose tokenizer and EOS ids every
    engine uses and whose junior the hf engine decodes with).

    junior: None = solo (no junior loaded; the vLLM engine runs the senior's own class).
    rollout_copy: hf in training, an ``rl.precision.RolloutModel`` (the compute-dtype copy
    decoded when the senior holds fp32 masters or another device is asked for).
    batch_rows: hf, the most rows decoded together (None: the whole batch).
    sleep, in_process, data_parallel: vllm in training (``engines.vllm_engine.VLLMEngine``).
    """

    senior: str
    junior: str | None = None
    device: object = "auto"
    junior_device: str | None = None
    dtype: str | None = "auto"
    seed: int = 0
    vllm_settings: object = None  # engines.vllm_engine.VLLMSettings
    server: object = None  # engines.server_client.ServerSettings
    pair: object = None
    rollout_copy: object = None
    batch_rows: int | None = None
    sleep: bool = False
    in_process: bool = False
    data_parallel: bool = False


@dataclass(frozen=True)
class EngineKind:
    """One row of the registry: how to open an engine and what it can do.

    opener: ``module:function`` (imported on use) taking an ``EngineSetup``.
    replays: the senior mask is recovered by replaying the schedule on the returned ids, so
    schedules that cannot be replayed (``ScheduleKind.replays`` false) are refused.
    remote: generation on a running server, which holds its own junior (``--server`` URL).
    vllm_settings: an in-process vLLM engine, set up by the ``--vllm-*`` settings.
    transformers: decodes transformers models loaded in this process (a loaded ``models.Pair``
    can be handed over as ``EngineSetup.pair`` and decoded as it is).
    text_turns: text-level handoff turns (``--protocol text``, the default for paragraph schedules) run on it.
    rollout_device: training decodes a copy of the senior on ``rollout_device``.
    overlaps: it can decode while the trainer trains (``max_staleness`` >= 1, ``rl.overlap``): generation runs in
    other processes (a server), or on a copy on another device (hf: ``rollout_device``, checked when the run's
    devices are known); the calls come from one worker thread, one at a time, never during a weight push.
    one_sender: one engine (a server) for all training processes: the main process alone pushes
    the senior's weights, the others gather alongside or wait (``rl.weights.EngineSync``).
    about: the engine in a few words, for the help of every ``--engine`` flag (``engine_help``).

    Every engine trains under several processes (one engine each, or one shared: ``one_sender``),
    whole (DDP) or sharded (FSDP2: it takes the stream ``rl.weight_stream.push`` gathers bucket by
    bucket; docs/sharding.md).
    """

    name: str
    opener: str
    replays: bool = False
    remote: bool = False
    vllm_settings: bool = False
    transformers: bool = False
    text_turns: bool = False
    rollout_device: bool = False
    overlaps: bool = False
    one_sender: bool = False
    about: str = ""

    def check_schedule(self, schedule: str) -> None:
        """TandemError unless this engine can run ``schedule`` (checked before any loading)."""
        from ..decoding.schedule import schedule_kind

        if self.replays and not schedule_kind(schedule).replays:
            from ..errors import TandemError

            raise TandemError(f"schedule {schedule!r} is not available on the vLLM engine (use engine hf)")

    def open(self, setup: EngineSetup) -> RolloutEngine:
        module, _, attr = self.opener.partition(":")
        return getattr(import_module(module), attr)(setup)


# the one table of engines: a new engine is its module (an opener returning a RolloutEngine) and one row here
ENGINES: dict[str, EngineKind] = {k.name: k for k in (
    EngineKind("hf", "tandem_rlvr.engines.hf:open_hf", transformers=True, text_turns=True,
               rollout_device=True, overlaps=True, about="our transformers decoder (the reference)"),
    EngineKind("vllm", "tandem_rlvr.engines.vllm_rollouts:open_vllm", replays=True, vllm_settings=True,
               text_turns=True,
               about="stock vLLM with the tandem plugin, in this process (pip install -e \".[vllm]\")"),
    EngineKind("vllm-server", "tandem_rlvr.engines.server_rollouts:open_server", replays=True, remote=True,
               overlaps=True, one_sender=True, about="a running `tandem serve` (--server URL)"),
)}


class _LocalEngines:
    """The names of the engines that need no server, read from ``ENGINES`` whenever asked (a live view,
    like ``ENGINES.keys()``: CLI choices and checks see an engine registered after import)."""

    def __iter__(self):
        return iter([k for k, e in ENGINES.items() if not e.remote])

    def __contains__(self, name) -> bool:
        return name in ENGINES and not ENGINES[name].remote

    def __len__(self) -> int:
        return len(list(iter(self)))


DEFAULT_ENGINE = "hf"
REMOTE_ENGINE = next(k for k, e in ENGINES.items() if e.remote)  # what --server selects
LOCAL_ENGINES = _LocalEngines()  # those that need no server


def engine_help(names=None) -> str:
    """``NAME: about`` of each engine in ``names`` (default: every registered one), for flag help texts."""
    names = ENGINES if names is None else names
    return "; ".join(f"{k}: {ENGINES[k].about}" if ENGINES[k].about else k for k in names)


def engine_kind(name: str) -> EngineKind:
    """The registry row of ``name``, or a TandemError listing the valid names."""
    if name not in ENGINES:
        from ..errors import TandemError

        raise TandemError(f"unknown engine {name!r}; valid: {', '.join(ENGINES)}")
    return ENGINES[name]


def check_vllm_schedule(schedule: str) -> None:
    """TandemError unless the vLLM engines can run ``schedule`` (checked before any loading)."""
    ENGINES["vllm"].check_schedule(schedule)


def open_engine(name: str, setup: EngineSetup) -> RolloutEngine:
    """Open engine ``name`` (a key of ``ENGINES``) from ``setup``."""
    return engine_kind(name).open(setup)
