"""A request's tandem arguments: the one parser shared by the vLLM logits processor, the
server's request validation and the clients that build requests.

Two forms reach ``SamplingParams.extra_args``:

- **flat** (what an OpenAI-compatible client sends, since vLLM's ``vllm_xargs`` takes only
  flat values): ``tandem_schedule``, ``tandem_p``, ``tandem_K``, ``tandem_seed``, ``tandem_junior``;
- **nested** (in-process engines): ``extra_args["tandem"] = {"schedule", "p", "K", "seed", "junior"}``.

``junior`` is the index of the junior that writes the request's junior turns in an engine that holds a
pool of juniors (``engines.vllm_model``; default 0, the first or only one). The parser checks it is an
integer >= 0; that it names a junior of the engine is checked where the pool size is known (the
in-process decoder, and the server's validation: ``POOL_SIZE_ENV``).

``parse`` turns either into a ``TandemArgs`` or raises ``RequestArgError`` naming the field, so
every bad value is refused when the request is validated (HTTP 400 on a server) and never
reaches the engine step. The coin seed defaults to the request's sampling ``seed``; a
schedule that draws coins (``ScheduleKind.draws_coins``) needs one of the two, since authorship
is recovered from it by replaying the schedule (``schedule.replay``); one that cannot be replayed
(``ScheduleKind.replays`` false) is refused. No vLLM import: clients use this module too.
"""

from __future__ import annotations

from dataclasses import dataclass

NESTED_KEY = "tandem"
PREFIX = "tandem_"
FIELDS = ("schedule", "p", "K", "seed", "junior")  # flat names are PREFIX + field
POOL_SIZE_ENV = "TANDEM_POOL_JUNIORS"  # juniors a served pool holds (set by tandem serve): request indices below it
SEED_LIMIT = 1 << 63


class RequestArgError(ValueError):
    """A bad tandem request argument; ``field`` is its name as the request spelled it."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class TandemArgs:
    """One request's schedule: name, p = P(senior), K (word backstop), coin seed, and the pool junior
    (an index) that writes its junior turns."""

    schedule: str
    p: float = 0.5
    K: int = 32
    seed: int = 0
    junior: int = 0

    def xargs(self) -> dict:
        """The flat form for ``vllm_xargs`` (an OpenAI client's ``extra_body``); ``tandem_junior`` only when
        it is not the first junior (so a one-junior request is what it was)."""
        return {f"{PREFIX}{k}": getattr(self, k) for k in FIELDS if k != "junior" or self.junior}


def _int(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            return int(v)
        raise RequestArgError(f"{name} must be an integer, got {v!r}", name)
    return v


def _check(schedule, p, K, seed, names: dict[str, str], junior=0) -> TandemArgs:
    from ..decoding.schedule import REGISTRY, schedule_kind, schedule_names

    if not isinstance(schedule, str) or schedule not in REGISTRY:
        raise RequestArgError(f"{names['schedule']}: unknown schedule {schedule!r}; valid: "
                              f"{', '.join(schedule_names(lambda k: k.replays))}", names["schedule"])
    if not schedule_kind(schedule).replays:
        raise RequestArgError(f"{names['schedule']}: schedule {schedule!r} is not available on the vLLM engine",
                              names["schedule"])
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= float(p) <= 1.0:
        raise RequestArgError(f"{names['p']} (senior probability) must be a number in [0, 1], got {p!r}", names["p"])
    K = _int(names["K"], K)
    if K < 1:
        raise RequestArgError(f"{names['K']} (tokens before a forced redraw) must be >= 1, got {K}", names["K"])
    seed = _int(names["seed"], seed)
    if not -SEED_LIMIT <= seed < SEED_LIMIT:
        raise RequestArgError(f"{names['seed']} must fit in 64 bits, got {seed}", names["seed"])
    junior = _int(names["junior"], junior)
    if junior < 0:
        raise RequestArgError(f"{names['junior']} (the pool junior's index) must be >= 0, got {junior}",
                              names["junior"])
    return TandemArgs(schedule, float(p), K, seed, junior)


def parse(extra_args: dict | None, request_seed: int | None = None) -> TandemArgs | None:
    """The request's ``TandemArgs`` (None: no tandem arguments, the senior writes alone).

    Raises ``RequestArgError`` (a ``ValueError``) naming the field for an unknown field, a bad value, both forms at
    once, or a coin-drawing schedule without ``tandem_seed`` or ``seed``.
    """
    from ..decoding.schedule import schedule_kind

    extra = extra_args or {}
    flat = {k: v for k, v in extra.items() if k.startswith(PREFIX)}
    nested = extra.get(NESTED_KEY)
    if nested is None and not flat:
        return None
    if nested is not None and flat:
        raise RequestArgError(f"give the tandem arguments flat ({', '.join(PREFIX + f for f in FIELDS)}) or "
                              f"nested ({NESTED_KEY!r}), not both", NESTED_KEY)
    if nested is not None:
        if not isinstance(nested, dict):
            raise RequestArgError(f"{NESTED_KEY!r} must be an object with keys {', '.join(FIELDS)}; flat request "
                                  f"arguments are {', '.join(PREFIX + f for f in FIELDS)}", NESTED_KEY)
        values, names = nested, {f: f"{NESTED_KEY}.{f}" for f in FIELDS}
    else:
        values, names = {k[len(PREFIX):]: v for k, v in flat.items()}, {f: PREFIX + f for f in FIELDS}
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        bad = (PREFIX if nested is None else f"{NESTED_KEY}.") + unknown[0]
        raise RequestArgError(f"unknown tandem argument {bad}; valid: {', '.join(names[f] for f in FIELDS)}", bad)
    if "schedule" not in values:
        raise RequestArgError(f"{names['schedule']} is required with the other tandem arguments", names["schedule"])
    seed = values.get("seed", request_seed)
    args = _check(values["schedule"], values.get("p", 0.5), values.get("K", 32), 0 if seed is None else seed, names,
                  values.get("junior", 0))
    if seed is None and schedule_kind(args.schedule).draws_coins:
        raise RequestArgError(f"{names['seed']} (or the request's seed) is required for schedule "
                              f"{args.schedule!r}: its authorship is recovered from that seed", names["seed"])
    return args
