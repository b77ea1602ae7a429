"""The judge: verdict parsers, templates, an OpenAI-compatible endpoint (a fake one on localhost),
a local model on our hf engine, the on-disk cache, and failures as None (never an exception)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from helpers.judge import FakeJudgeServer
from tandem_rlvr.engines.judge_local import open_judge
from tandem_rlvr.errors import TandemError
from tandem_rlvr.rewards.judge import Judge, JudgeSettings, parse_verdict, template_text

pytest.importorskip("openai")


@pytest.fixture
def server():
    s = FakeJudgeServer()
    yield s
    s.close()


ITEMS = [("What is 2+2?", "By symmetry the answer is 4.", "4"),
         ("What is 2+2?", "Try every pair by brute force: 4.", "4"),
         ("What is 2+2?", "By symmetry the answer is 4.", "4")]  # a repeat: one request for both


@pytest.mark.parametrize("parser, reply, expected", [
    ("elegant-bashy", "It is bashy at first, but the verdict is: Elegant", 1.0),
    ("elegant-bashy", "ELEGANT? No. BASHY", 0.0),
    ("elegant-bashy", "inelegantly done", None),  # a word inside another word is no verdict
    ("yes-no", "yes, mostly. Final answer: NO", 0.0),
    ("score:10", "I'd give it 7/10", 0.7),
    ("score:10", "scores 3 then 8", 0.8),
    ("score:10", "11", None),  # outside [0, N]
    ("yes-no", None, None),
])
def test_parser_reads_the_last_verdict(parser, reply, expected):
    assert parse_verdict(parser, reply) == expected


def test_bad_template_parser_and_model_are_one_line_errors(tmp_path):
    bad = tmp_path / "t.txt"
    bad.write_text("Grade {solution}")
    for kw in (dict(template=str(bad)), dict(template="nope"), dict(parser="score:0"), dict(parser="stars")):
        with pytest.raises(TandemError):
            JudgeSettings("http://127.0.0.1:9", **kw)
    with pytest.raises(TandemError, match="no server answered"):
        Judge(JudgeSettings("http://127.0.0.1:9", retries=0, timeout=5))
    good = tmp_path / "g.txt"
    good.write_text("Q {question} R {response} {{literal}}")
    assert template_text(str(good)).format(question="q", response="r", answer="a") == "Q q R r {literal}"


def test_endpoint_verdicts_and_cache_mean_a_resumed_run_pays_nothing(server, tmp_path):
    cache = tmp_path / "cache.sqlite"
    judge = Judge(JudgeSettings(server.url, retries=0), cache=cache)
    verdicts, stats = judge.verdicts(ITEMS)
    judge.close()
    assert verdicts == [1.0, 0.0, 1.0]
    assert (stats.asked, stats.cached, stats.queried, stats.failed) == (3, 0, 2, 0)
    assert len(server.requests) == 2  # the repeated response was asked once
    assert server.requests[0]["temperature"] == 0.0 and server.requests[0]["model"] == "fake-judge"
    assert sorted("every pair" in r["messages"][0]["content"] for r in server.requests) == [False, True]

    again = Judge(JudgeSettings(server.url, retries=0), cache=cache)  # a resumed run: a new process, same cache
    verdicts2, stats2 = again.verdicts(ITEMS)
    again.close()
    assert verdicts2 == verdicts and (stats2.cached, stats2.queried) == (3, 0)
    assert len(server.requests) == 2  # no new completion requests

    other = Judge(JudgeSettings(server.url, retries=0, template="yes-no", parser="yes-no"), cache=cache)
    _, stats3 = other.verdicts(ITEMS[:1])  # another template is another judge: never a stale verdict
    other.close()
    assert stats3.cached == 0 and stats3.queried == 1


def test_endpoint_errors_are_retried_then_none(tmp_path):
    s = FakeJudgeServer("error")
    try:
        judge = Judge(JudgeSettings(s.url, retries=1), cache=tmp_path / "c.sqlite")
        verdicts, stats = judge.verdicts(ITEMS[:2])
        assert verdicts == [None, None] and stats.failed == 2
        assert len(s.requests) == 2 * 2  # each item: the first attempt and one retry
        assert judge.cache.get([judge.cache.key(judge.id, q, r) for q, r, _ in ITEMS[:2]]) == {}  # failures not cached
        judge.close()
    finally:
        s.close()


def test_endpoint_that_never_answers_times_out_to_none(tmp_path):
    s = FakeJudgeServer("hang")
    try:
        judge = Judge(JudgeSettings(s.url, retries=0, timeout=0.5))
        verdicts, stats = judge.verdicts(ITEMS[:1])
        assert verdicts == [None] and stats.failed == 1
        judge.close()
    finally:
        s.close()


def test_a_local_judge_without_a_backend_is_refused_before_any_loading(tmp_path):
    """rewards never opens an engine: a local judge model comes through engines.judge_local.open_judge."""
    with pytest.raises(TandemError, match="open_judge"):
        Judge(JudgeSettings(str(tmp_path / "no-model-here")))


def test_local_judge_replies_are_the_models_greedy_decode(model_dir, tmp_path):
    settings = JudgeSettings(str(model_dir), template="yes-no", parser="score:100", max_tokens=6, batch_size=2,
                             device="cpu", dtype="float32")
    judge = open_judge(settings, cache=tmp_path / "c.sqlite")
    verdicts, stats = judge.verdicts(ITEMS)
    assert stats.queried == 2 and stats.asked == 3

    # independently: transformers' greedy generate on the rendered prompt (plain template: text + blank line)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    for (q, r, a), v in zip(ITEMS, verdicts, strict=True):
        prompt = template_text("yes-no").format(question=q, response=r, answer=a) + "\n\n"
        ids = torch.tensor([tok.encode(prompt, add_special_tokens=False)])
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=6,
                             pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
        reply = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
        assert v == parse_verdict("score:100", reply)
    rows = judge.cache.get([judge.cache.key(judge.id, q, r) for q, r, _ in ITEMS])
    assert len(rows) == 2  # both distinct replies cached
    judge.close()
