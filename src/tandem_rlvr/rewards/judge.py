"""A judge model's verdict on a response: prompt template, verdict parser, backend, on-disk cache.

What: ``Judge(settings).verdicts(items)`` turns (question, response, gold answer) triples into
verdicts in [0, 1] (1 = the quality the template asks about, e.g. an elegant solution), or None
where the judge failed (no answer in time, an error, a reply the parser cannot read). The reward
term ``rewards.terms.JudgeTerm`` turns a None into a logged zero; nothing here raises mid-run.

Backends (``JudgeSettings.model``):

- an ``http(s)://`` URL: any OpenAI-compatible chat endpoint (``vllm serve`` on another GPU, a
  hosted API); needs the ``openai`` client (``pip install openai``). Requests run ``concurrency``
  at a time; timeouts and retries (connection errors, 408/429/5xx, with backoff) are the client's,
  as in ``engines.server_client``. The API key comes from ``$TANDEM_JUDGE_API_KEY`` (never from a
  config file, so it is never recorded in a run directory).
- anything else: a local model (directory, hub id, ``tiny``) on our hf engine, decoded greedily
  in batches of ``batch_size``. Opening a model is the engines' floor, above this one, so that
  backend lives there (``engines.judge_local``) and ``engines.judge_local.open_judge`` builds a
  ``Judge`` of either kind; ``Judge`` alone takes a URL or a backend it is given.

Both decode greedily (temperature 0), so a verdict is a function of (judge, prompt, response):
the cache (SQLite, safe across processes) stores the judge's reply under
sha256(judge identifier, question, response), and a resumed run, whose rollouts are regenerated
identically, pays for no verdict twice. The identifier covers the model, the served name, the
template text, the parser and the reply budget, so changing any of them never reuses a stale
verdict. Failures to get a reply are not cached (a later run retries them).

Templates: a built-in name (``TEMPLATES``) or a text file, with ``{question}``, ``{response}``
and ``{answer}`` placeholders (``{{``/``}}`` for literal braces). Parsers: ``elegant-bashy``
(the last of the words ELEGANT/BASHY: 1/0), ``yes-no`` (the last YES/NO: 1/0) and ``score:N``
(the last number x in [0, N], or x of a last "x/N": x / N).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sqlite3
import string
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..errors import TandemError
from ..io import read_text

log = logging.getLogger("tandem_rlvr")
API_KEY_ENV = "TANDEM_JUDGE_API_KEY"

TEMPLATES = {
    # The elegance judge of the replication's third extension (our wording): elegant = a short
    # argument resting on an insight; bashy = brute force, long computation or case analysis.
    "elegance": (
        "You are grading the style of a correct solution to a competition math problem.\n\n"
        "Problem:\n{question}\n\nReference answer: {answer}\n\nSolution:\n{response}\n\n"
        "Call the solution ELEGANT if it rests on a key insight (a symmetry, an invariant, a clever substitution, "
        "a structural argument) that makes the work short. Call it BASHY if it gets the answer by brute force: "
        "long computation, coordinate or algebra bashing, exhaustive case analysis or enumeration.\n"
        "Explain briefly, then give your verdict on the last line as one word: ELEGANT or BASHY."),
    "yes-no": (
        "Problem:\n{question}\n\nReference answer: {answer}\n\nResponse:\n{response}\n\n"
        "Is the response's reasoning clear, correct and easy to follow? Explain briefly, then answer on the last "
        "line with one word: YES or NO."),
}
_WORDS = {"elegant-bashy": ("ELEGANT", "BASHY"), "yes-no": ("YES", "NO")}
_NUMBER = re.compile(r"(-?\d+(?:\.\d+)?)(?:\s*/\s*\d+(?:\.\d+)?)?")  # "7" or "7/10": the numerator
PLACEHOLDERS = {"question", "response", "answer"}


def parse_verdict(parser: str, reply: str | None) -> float | None:
    """The verdict in [0, 1] that ``parser`` reads from ``reply``; None if it reads none."""
    if not isinstance(reply, str):
        return None
    if parser in _WORDS:
        good, bad = _WORDS[parser]
        hits = re.findall(rf"\b({good}|{bad})\b", reply.upper())
        return None if not hits else float(hits[-1] == good)
    top = _score_max(parser)
    hits = [float(x) for x in _NUMBER.findall(reply)]
    if not hits or not 0 <= hits[-1] <= top:
        return None
    return hits[-1] / top


def _score_max(parser: str) -> float:
    name, _, top = parser.partition(":")
    try:
        value = float(top)
    except ValueError:
        value = 0.0
    if name != "score" or not value > 0:
        raise TandemError(f"unknown judge parser {parser!r}; valid: elegant-bashy, yes-no, score:N (N > 0)")
    return value


def check_parser(parser: str) -> str:
    if parser not in _WORDS:
        _score_max(parser)
    return parser


def template_text(template: str) -> str:
    """The text of a built-in template or a template file; TandemError naming a bad one."""
    if template in TEMPLATES:
        text = TEMPLATES[template]
    elif Path(template).expanduser().is_file():
        text = read_text(Path(template).expanduser())
    else:
        raise TandemError(f"judge template {template!r} is neither a file nor a built-in ({', '.join(TEMPLATES)})")
    try:
        names = {f for _, f, _, _ in string.Formatter().parse(text) if f is not None}
    except ValueError as e:
        raise TandemError(f"judge template {template!r}: {e} (write {{{{ and }}}} for literal braces)") from None
    if not names <= PLACEHOLDERS or "response" not in names:
        raise TandemError(f"judge template {template!r} must use {{response}} and only "
                          f"{{question}}, {{response}}, {{answer}}; it uses {sorted(names)}")
    return text


@dataclass(frozen=True)
class JudgeSettings:
    """Who judges and how. See the module docstring; TrainConfig's ``judge_*`` keys fill these.

    model: an http(s) URL of an OpenAI-compatible server, or a local model (directory, hub id, tiny).
    served_model: the model name at the endpoint (default: the first the server lists).
    max_tokens: reply budget. timeout: seconds per request (endpoint). retries: attempts after the
    first (endpoint). concurrency: requests in flight (endpoint). batch_size: rows decoded
    together (local). device/dtype: where and how a local judge runs.
    """

    model: str
    template: str = "elegance"
    parser: str = "elegant-bashy"
    served_model: str | None = None
    max_tokens: int = 512
    timeout: float = 120.0
    retries: int = 2
    concurrency: int = 8
    batch_size: int = 16
    device: str | None = "auto"
    dtype: str | None = "auto"

    def __post_init__(self):
        if not self.model:
            raise TandemError("the judge needs a model: a local model or an http(s) URL of an OpenAI-compatible server")
        template_text(self.template)
        check_parser(self.parser)
        if self.max_tokens < 1 or self.timeout <= 0 or self.retries < 0 or self.concurrency < 1 or self.batch_size < 1:
            raise TandemError("judge_max_tokens, judge_concurrency and the batch size must be >= 1, judge_timeout > 0 "
                              "and judge_retries >= 0")

    @property
    def endpoint(self) -> bool:
        return self.model.startswith(("http://", "https://"))

    @property
    def identifier(self) -> str:
        """What a verdict depends on (cache key part, recorded in logs): model, name, template, parser, budget."""
        digest = hashlib.sha256(template_text(self.template).encode()).hexdigest()[:12]
        return (f"{self.model}|{self.served_model or ''}|template:{digest}|{self.parser}|max_tokens:{self.max_tokens}"
                "|greedy")


class VerdictCache:
    """Judge replies on disk: key -> reply text (SQLite; one writer at a time across processes)."""

    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, judge TEXT, reply TEXT)")
        self._db.commit()

    @staticmethod
    def key(judge: str, question: str, response: str) -> str:
        return hashlib.sha256(json.dumps([judge, question, response]).encode()).hexdigest()

    def get(self, keys: Sequence[str]) -> dict[str, str]:
        out = {}
        with self._lock:
            for i in range(0, len(keys), 500):  # SQLite's bound-parameter limit
                part = list(keys[i:i + 500])
                q = f"SELECT key, reply FROM replies WHERE key IN ({','.join('?' * len(part))})"
                out.update(self._db.execute(q, part).fetchall())
        return out

    def put(self, judge: str, replies: dict[str, str]) -> None:
        with self._lock:
            self._db.executemany("INSERT OR REPLACE INTO replies VALUES (?, ?, ?)",
                                 [(k, judge, r) for k, r in replies.items()])
            self._db.commit()

    def close(self) -> None:
        self._db.close()


class EndpointBackend:
    """Chat completions from an OpenAI-compatible server; a failed request is None, never an exception."""

    def __init__(self, s: JudgeSettings):
        try:
            import openai
        except ImportError:
            raise TandemError("a judge at an http(s) URL needs the OpenAI client: pip install openai") from None
        base = s.model.rstrip("/")
        self.client = openai.OpenAI(base_url=base if base.endswith("/v1") else f"{base}/v1",
                                    api_key=os.environ.get(API_KEY_ENV) or "EMPTY", timeout=s.timeout,
                                    max_retries=s.retries)
        self.settings = s
        self.model = s.served_model
        if self.model is None:  # the first model the server lists; checked now, before any training
            try:
                self.model = next(iter(self.client.models.list())).id
            except Exception as e:  # noqa: BLE001 (any failure here is a start-up error, named)
                raise TandemError(f"judge {s.model}: no server answered ({type(e).__name__}: {e})") from None

    def _one(self, prompt: str) -> str | None:
        try:
            r = self.client.chat.completions.create(model=self.model, messages=[{"role": "user", "content": prompt}],
                                                    temperature=0.0, max_tokens=self.settings.max_tokens)
            return r.choices[0].message.content
        except Exception as e:  # noqa: BLE001 (a judge failure is a logged zero, never a crash mid-run)
            log.warning("judge %s: request failed after %d retries (%s: %s)", self.settings.model,
                        self.settings.retries, type(e).__name__, str(e)[:200])
            return None

    def complete(self, prompts: list[str]) -> list[str | None]:
        with ThreadPoolExecutor(self.settings.concurrency) as pool:
            return list(pool.map(self._one, prompts))

    def close(self) -> None:
        self.client.close()


@dataclass
class JudgeStats:
    """One call's counts: asked (items), cached (answered from the cache), queried (sent to the
    judge, after de-duplication), failed (items without a verdict: no reply or an unreadable one)."""

    asked: int = 0
    cached: int = 0
    queried: int = 0
    failed: int = 0


class Judge:
    """Verdicts with the cache in front of a backend (module docstring)."""

    def __init__(self, settings: JudgeSettings, cache: str | Path | None = None, backend=None):
        self.settings = settings
        self.template = template_text(settings.template)
        self.id = settings.identifier
        self.cache = VerdictCache(cache) if cache is not None else None
        if backend is None and not settings.endpoint:
            raise TandemError(f"judge {settings.model}: a local judge model runs on an engine; open it with "
                              "engines.judge_local.open_judge")
        self.backend = backend or EndpointBackend(settings)

    def render(self, question: str, response: str, answer: str) -> str:
        return self.template.format(question=question, response=response, answer=answer)

    def verdicts(self, items: Sequence[tuple[str, str, str]]) -> tuple[list[float | None], JudgeStats]:
        """One verdict (or None) per (question, response, answer) item, in order."""
        keys = [VerdictCache.key(self.id, q, r) for q, r, _ in items]
        replies: dict[str, str | None] = self.cache.get(keys) if self.cache is not None else {}
        stats = JudgeStats(asked=len(items), cached=sum(k in replies for k in keys))
        todo = {}  # key -> rendered prompt, de-duplicated (a group often repeats a response)
        for k, (q, r, a) in zip(keys, items, strict=True):
            if k not in replies and k not in todo:
                todo[k] = self.render(q, r, a)
        if todo:
            got = dict(zip(todo, self.backend.complete(list(todo.values())), strict=True))  # one reply per prompt
            stats.queried = len(todo)
            fresh = {k: v for k, v in got.items() if isinstance(v, str)}
            if self.cache is not None and fresh:
                self.cache.put(self.id, fresh)
            replies.update(got)
        out = [parse_verdict(self.settings.parser, replies.get(k)) for k in keys]
        stats.failed = sum(v is None for v in out)
        return out, stats

    def close(self) -> None:
        """Free the backend and the cache (idempotent)."""
        if self.backend is not None and hasattr(self.backend, "close"):
            self.backend.close()
        if self.cache is not None:
            self.cache.close()
        self.backend = self.cache = None
