"""Which juniors a ``tandem serve`` server holds, and the clients' check that it holds a run's.

A request names its junior by index (``tandem_junior``), so a server that holds other juniors at those
indices would answer every request, written by the wrong junior. The server therefore says what it holds:

- **Server.** ``tandem serve`` works out ``pool_report(juniors)`` before vLLM starts: per junior, in the
  order served, its ``index``, its ``name`` as records name models (``models.recorded_model``: a built-in
  model by its built-in name, another local path absolute, a hub id as given) and its weights'
  ``fingerprint`` (``fingerprint.model_fingerprint``: the one run directories record; cached per file, so
  a checkpoint is hashed once). vLLM's server process gets it as JSON in ``REPORT_ENV`` and answers
  ``GET /v1/tandem/pool`` with it through ``PoolEndpoint``, an ASGI middleware installed with vLLM's own
  ``--middleware`` flag (no vLLM code is patched). The path is under ``/v1``, so it takes the server's
  API key as the completions do (vLLM's key check sits inside this middleware, so the key is checked
  here, against the same ``VLLM_API_KEY`` ``tandem serve`` gives vLLM).
- **Clients.** ``check_served_juniors(settings, specs)`` reads the report and refuses, in one line naming
  the server and the juniors that differ, a server whose juniors are not the run's, in the run's order:
  training on ``--engine vllm-server`` (before any model loads) and ``tandem eval handoff --server URL
  --junior A[,B]`` (before any sampling). Two juniors are the same when their fingerprints are equal,
  where both sides can hash the files (a server on another machine may keep them under another path);
  otherwise, when the names are equal (a hub id neither side has cached, a path the client cannot read).
- **A server without the report** (404: started by a tandem from before it, or a plain ``vllm serve``):
  a pool run is refused (its rows would name juniors by index with nothing to check the indices against);
  a one-junior run goes on with a warning, as such runs did before the report existed.

No vLLM import here: the clients and ``tandem serve``'s parent process read this module too.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
from typing import Sequence

from ..errors import TandemError

log = logging.getLogger("tandem_rlvr")

PATH = "/v1/tandem/pool"  # GET: {"juniors": [{"index", "name", "fingerprint"}, ...]}
REPORT_ENV = "TANDEM_SERVED_POOL"  # the report as JSON, for vLLM's server process (set by tandem serve)
KEY_ENV = "VLLM_API_KEY"  # the key vLLM's server checks when --api-key is not given; tandem serve sets both
MIDDLEWARE = f"{__name__}.PoolEndpoint"  # vLLM's --middleware value


def pool_report(specs: Sequence[str], paths: Sequence[str] | None = None) -> dict:
    """The report of a server holding juniors ``specs`` (as given to ``tandem serve``), in that order;
    ``paths``: their resolved checkpoints (``models.resolve_model_path``), when the caller has them."""
    from ..fingerprint import model_fingerprint
    from ..models import recorded_model, resolve_model_path

    paths = [resolve_model_path(s) for s in specs] if paths is None else list(paths)
    return {"juniors": [{"index": i, "name": recorded_model(s), "fingerprint": model_fingerprint(path)}
                        for i, (s, path) in enumerate(zip(specs, paths, strict=True))]}


class PoolEndpoint:
    """ASGI middleware (vLLM's ``--middleware``): answers ``GET PATH`` with ``REPORT_ENV``'s report; every
    other request goes on to vLLM untouched."""

    def __init__(self, app):
        self.app = app
        self.body = os.environ.get(REPORT_ENV, "").encode()
        key = os.environ.get(KEY_ENV)
        self.key = f"Bearer {key}".encode() if key else None

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http" or scope.get("path", "").removeprefix(scope.get("root_path", "")) != PATH:
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        if self.key is not None and not hmac.compare_digest(headers.get(b"authorization", b""), self.key):
            status, body = 401, json.dumps({"error": "Unauthorized"}).encode()
        elif scope.get("method") != "GET":
            status, body = 405, json.dumps({"error": f"{PATH} takes GET"}).encode()
        elif not self.body:
            status, body = 404, json.dumps({"error": f"{REPORT_ENV} is not set: not started by tandem serve"}).encode()
        else:
            status, body = 200, self.body
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def served_juniors(settings) -> list[dict] | None:
    """The juniors the server of ``settings`` (``server_client.ServerSettings``) reports, in order; None
    when it has no report (404). A server that does not answer, or refuses the key, is a ``TandemError``."""
    import requests

    url = settings.base_url[: -len("/v1")] + PATH
    headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
    try:
        r = requests.get(url, headers=headers, timeout=min(settings.timeout, 60))
    except OSError as e:
        raise TandemError(f"{settings.url}: no server answered ({type(e).__name__})") from None
    if r.status_code == 404:
        return None
    if r.status_code == 401:
        raise TandemError(f"{settings.url}: the server refused the API key (pass --api-key)")
    try:
        r.raise_for_status()
        juniors = r.json()["juniors"]
        return [{"index": int(j["index"]), "name": str(j["name"]), "fingerprint": j.get("fingerprint")}
                for j in juniors]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise TandemError(f"{settings.url}{PATH}: not a junior report ({type(e).__name__}: {e})") from None


def _known(fp) -> str | None:
    """A fingerprint of files (a hub id's ``hub:<id>`` stands for the name only: not comparable)."""
    return fp if isinstance(fp, str) and fp and not fp.startswith("hub:") else None


def local_junior(spec: str) -> dict:
    """``{"name", "fingerprint"}`` of a run's junior ``spec`` here (fingerprint None where its files are not)."""
    from ..fingerprint import model_fingerprint
    from ..models import recorded_model, resolve_model_path

    try:
        fp = model_fingerprint(resolve_model_path(spec))
    except TandemError:  # not here (a path of the server's machine): compared by name
        fp = None
    return {"name": recorded_model(spec), "fingerprint": fp}


def same_junior(here: dict, there: dict) -> bool:
    """Fingerprints equal where both are known, else names equal."""
    a, b = _known(here["fingerprint"]), _known(there["fingerprint"])
    return a == b if a and b else here["name"] == there["name"]


def _listing(juniors: list[dict]) -> str:
    return "[" + ", ".join(f"{i}: {j['name']}" for i, j in enumerate(juniors)) + "]"


def check_served_juniors(settings, specs: Sequence[str]) -> list[dict]:
    """Refuse (``TandemError``, one line) a server that does not hold exactly the juniors ``specs``, in that
    order. Returns ``{"name", "fingerprint"}`` of each of ``specs`` (the run's name; the served weights'
    fingerprint where the server reports one, else the files' here)."""
    report = served_juniors(settings)
    run = [local_junior(s) for s in specs]
    if report is None:
        if len(run) > 1:
            raise TandemError(f"{settings.url} does not report which juniors it holds (started by a tandem serve "
                              f"from before {PATH}, or not by tandem serve), so this pool's juniors "
                              f"{_listing(run)} cannot be checked against its indices: restart it with "
                              f"`tandem serve SENIOR --junior {','.join(j['name'] for j in run)}`")
        log.warning("%s does not report which junior it holds (a server from before %s); taking it to be %s",
                    settings.url, PATH, run[0]["name"])
        return run
    start = f"`tandem serve SENIOR --junior {','.join(j['name'] for j in run)}`"
    if len(report) != len(run):
        raise TandemError(f"{settings.url} holds {len(report)} junior(s) {_listing(report)}, this run "
                          f"{len(run)} {_listing(run)}: start the server with {start}")
    bad = [i for i, (a, b) in enumerate(zip(run, report, strict=True)) if not same_junior(a, b)]
    if bad:
        what = "; ".join(f"junior {i} is {report[i]['name']} (fingerprint {report[i]['fingerprint']}) there, "
                         f"{run[i]['name']} (fingerprint {run[i]['fingerprint']}) here" for i in bad)
        raise TandemError(f"{settings.url} holds other juniors than this run: {what}; the server holds "
                          f"{_listing(report)}, the run {_listing(run)}: start it with {start}")
    return [{"name": a["name"], "fingerprint": _known(b["fingerprint"]) or a["fingerprint"]}
            for a, b in zip(run, report, strict=True)]
