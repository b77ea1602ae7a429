"""What a server says it holds, and the clients' check (``engines/served_pool.py``), without vLLM.

- ``PoolEndpoint`` (the ASGI middleware ``tandem serve`` gives vLLM) answers ``GET /v1/tandem/pool`` with
  the report it was started with, asks for the server's key as ``/v1`` does, and passes every other request
  on untouched;
- ``check_served_juniors`` accepts a server holding the run's juniors in the run's order (by fingerprint
  when the paths differ), refuses another order, another junior or another count in one line naming the
  server and the differing juniors, refuses a pool on a server without a report and lets one junior through
  with a warning there. The real server is exercised in tests/distributed/test_vllm_serve_pool.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil

import pytest

from conftest import make_model
from tandem_rlvr.engines import served_pool
from tandem_rlvr.engines.server_client import ServerSettings
from tandem_rlvr.errors import TandemError
from tandem_rlvr.fingerprint import model_fingerprint

URL = "http://127.0.0.1:9"


def _call(app, path: str, method: str = "GET", headers=()):
    """(status, body) of one HTTP request through the ASGI ``app``."""
    sent = []

    async def receive():
        return {"type": "http.request", "body": b""}

    async def send(msg):
        sent.append(msg)

    scope = {"type": "http", "path": path, "method": method, "root_path": "", "headers": list(headers)}
    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_the_endpoint_answers_the_report_with_the_key_and_passes_other_requests_on(monkeypatch):
    report = {"juniors": [{"index": 0, "name": "/m/a", "fingerprint": "f0"}, {"index": 1, "name": "/m/b",
                                                                               "fingerprint": "f1"}]}
    monkeypatch.setenv(served_pool.REPORT_ENV, json.dumps(report))
    monkeypatch.setenv(served_pool.KEY_ENV, "k")
    passed = []

    async def vllm_app(scope, receive, send):  # stands for vLLM's app behind the middleware
        passed.append(scope["path"])
        await send({"type": "http.response.start", "status": 299, "headers": []})
        await send({"type": "http.response.body", "body": b"vllm"})

    app = served_pool.PoolEndpoint(vllm_app)
    status, body = _call(app, served_pool.PATH, headers=[(b"authorization", b"Bearer k")])
    assert status == 200 and json.loads(body) == report
    assert _call(app, served_pool.PATH)[0] == 401  # no key
    assert _call(app, served_pool.PATH, headers=[(b"authorization", b"Bearer other")])[0] == 401
    assert _call(app, served_pool.PATH, "POST", [(b"authorization", b"Bearer k")])[0] == 405
    assert _call(app, "/v1/completions", "POST") == (299, b"vllm") and passed == ["/v1/completions"]
    monkeypatch.delenv(served_pool.KEY_ENV)
    assert _call(served_pool.PoolEndpoint(vllm_app), served_pool.PATH)[0] == 200  # a server without a key


@pytest.fixture(scope="module")
def juniors(tmp_path_factory, tok):
    """Junior a, a byte copy of it under another path, and junior b of other weights."""
    root = tmp_path_factory.mktemp("served")
    for name, seed in (("a", 0), ("b", 1)):
        make_model(len(tok), seed, hidden=32, layers=1).save_pretrained(root / name)
        tok.save_pretrained(root / name)
    shutil.copytree(root / "a", root / "a_copy")
    return root


def _serve(monkeypatch, report):
    """The client reads ``report`` (None: a server without the endpoint)."""
    monkeypatch.setattr(served_pool, "served_juniors", lambda settings: None if report is None else report["juniors"])


def test_a_server_holding_the_runs_juniors_in_order_is_accepted_by_fingerprint_across_paths(juniors, monkeypatch):
    a, b, a_copy = (str(juniors / n) for n in ("a", "b", "a_copy"))
    _serve(monkeypatch, served_pool.pool_report([a_copy, b]))  # the server keeps a under another path
    got = served_pool.check_served_juniors(ServerSettings(URL), [a, b])
    assert [j["name"] for j in got] == [a, b]  # the run's names; the weights' fingerprints
    assert [j["fingerprint"] for j in got] == [model_fingerprint(a), model_fingerprint(b)]
    assert model_fingerprint(a) == model_fingerprint(a_copy) != model_fingerprint(b)


@pytest.mark.parametrize("case", ["order", "other", "count"])
def test_a_server_with_other_juniors_is_refused_in_one_line_naming_them(juniors, monkeypatch, case):
    a, b = str(juniors / "a"), str(juniors / "b")
    served = {"order": [b, a], "other": [a, a], "count": [a]}[case]
    _serve(monkeypatch, served_pool.pool_report(served))
    with pytest.raises(TandemError) as e:
        served_pool.check_served_juniors(ServerSettings(URL), [a, b])
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(URL)
    if case == "count":
        assert "holds 1 junior(s)" in msg and f"this run 2 [0: {a}, 1: {b}]" in msg
    else:
        differing = [i for i in (0, 1) if served[i] != [a, b][i]]
        assert all(f"junior {i} is {served[i]}" in msg for i in differing)
        assert ("junior 0 is" in msg) == (0 in differing)
    assert f"--junior {a},{b}" in msg


def test_a_server_without_a_report_refuses_a_pool_and_lets_one_junior_through_with_a_warning(juniors, monkeypatch,
                                                                                            caplog):
    a, b = str(juniors / "a"), str(juniors / "b")
    _serve(monkeypatch, None)
    with pytest.raises(TandemError, match="does not report which juniors it holds"):
        served_pool.check_served_juniors(ServerSettings(URL), [a, b])
    with caplog.at_level(logging.WARNING, logger="tandem_rlvr"):
        got = served_pool.check_served_juniors(ServerSettings(URL), [a])
    assert [j["name"] for j in got] == [a] and "does not report which junior it holds" in caplog.text


def test_a_junior_whose_files_are_not_here_is_compared_by_its_name():
    here = served_pool.local_junior("/nowhere/junior")
    assert here == {"name": "/nowhere/junior", "fingerprint": None}
    assert served_pool.same_junior(here, {"name": "/nowhere/junior", "fingerprint": "0123456789abcdef"})
    assert not served_pool.same_junior(here, {"name": "/nowhere/other", "fingerprint": "0123456789abcdef"})
    assert not served_pool.same_junior({"name": "x", "fingerprint": "aa"}, {"name": "x", "fingerprint": "bb"})
    assert served_pool.same_junior({"name": "o/m", "fingerprint": "hub:o/m"}, {"name": "o/m", "fingerprint": "cc"})
