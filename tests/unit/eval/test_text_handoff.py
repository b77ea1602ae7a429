"""Text-level handoff (``--protocol text``): the batched turns against a plain one-row loop,
authorship per character, the round cap, the stream protocol's refusal of another vocabulary,
and the command end to end with resume."""

import json

import pytest
import torch

from tandem_rlvr.cli import main
from tandem_rlvr.config import EvalConfig
from tandem_rlvr.decoding.sampling import SamplingParams
from tandem_rlvr.errors import TandemError
from tandem_rlvr.eval.measure.metrics import handoff_diagnostics
from tandem_rlvr.eval.sample.text_handoff import TextHandoff, TurnModel
from tandem_rlvr.tasks import task_row

from conftest import make_model, make_tokenizer
from helpers.handoff import PROBLEMS, TASK, exact_row, handoff


def _reference(models, toks, prompts, budget):
    """One chain, one row, greedy, the whole prefix recomputed per token: turns as (author, text, tokens, end)."""
    text, used, who, turns = "", 0, 0, []
    while True:
        m, t = models[who], toks[who]
        ids = t.encode(prompts[who] + text, add_special_tokens=False)
        cap = min(budget - used, m.config.max_position_embeddings - len(ids))
        gen, end = [], None
        while end is None:
            gen.append(int(m(torch.tensor([ids + gen])).logits[0, -1].argmax()))
            out = t.decode(gen, skip_special_tokens=True)
            if gen[-1] == t.eos_token_id:
                end = "eos"
            elif "\n\n" in out:
                end, out = "break", out[: out.index("\n\n") + 2]
            elif len(gen) == cap:
                end = "length"
        turns.append((who, out, len(gen), end))
        text, used = text + out, used + len(gen)
        if end != "break" or used >= budget:
            return turns
        who = 1 - who


@pytest.mark.slow  # the reference recomputes the whole prefix per token
@torch.no_grad()
def test_batched_turns_equal_one_row_reference_greedy(cross_pair):
    s, ts, j, tj = cross_pair
    th = handoff(cross_pair)
    chains = [th.new_chain(p, k, 100 + 10 * i + k, TASK) for i, p in enumerate(PROBLEMS) for k in range(2)]
    th.run(chains)
    prompts = [p.problem + "\n\n" for p in PROBLEMS]  # the plain template, both models
    for c in chains:
        pr = prompts[int(c.problem.problem_id)]
        assert c.turns == _reference((s, j), (ts, tj), (pr, pr), 80)
    assert {w for c in chains for w, *_ in c.turns} == {0, 1}  # both models wrote, across tokenizers
    assert any(len(c.turns) >= 3 for c in chains)


def test_rows_keep_authorship_per_character_and_shares_by_hand(cross_pair):
    s, ts, j, tj = cross_pair
    th = handoff(cross_pair)
    chains = [th.new_chain(p, 0, 5, TASK) for p in PROBLEMS]
    th.run(chains)
    for c in chains:
        row = th.row(c, TASK.grade([c.text], [task_row(c.problem)])[0])
        assert "".join(t["text"] for t in row["turns"]) == row["response"]
        sen = [t["text"] for t in row["turns"] if t["author"] == "senior"]
        jun = [t["text"] for t in row["turns"] if t["author"] == "junior"]
        n_s, n_j = sum(map(len, sen)), sum(map(len, jun))
        assert row["senior_share_chars"] == pytest.approx(n_s / (n_s + n_j))
        js = sum(len(tj.encode(x)) for x in sen)
        assert row["senior_share_junior_tokens"] == pytest.approx(js / (js + sum(len(tj.encode(x)) for x in jun)))
        ss = sum(len(ts.encode(x)) for x in sen)
        assert sum(row["senior_mask"]) == ss and row["senior_share"] == pytest.approx(ss / len(row["token_ids"]))
        assert row["generated_tokens"] == sum(t["tokens"] for t in row["turns"])
        jt = [t for t in row["turns"] if t["author"] == "junior"]
        assert row["junior_lp_sum"] == pytest.approx(sum(t["logprob_sum"] for t in jt))
        n_j = sum(t["tokens"] for t in jt)  # the junior's own tokens, as it generated them
        if n_j:
            assert handoff_diagnostics([row])["junior_logprob"]["mean"] == pytest.approx(row["junior_lp_sum"] / n_j)


def test_round_cap_ends_live_chains_after_one_senior_and_one_junior_turn(cross_pair):
    th = handoff(cross_pair, max_rounds=1)
    chains = [th.new_chain(p, 0, 5, TASK) for p in PROBLEMS]
    th.run(chains)
    for c in chains:
        assert len(c.turns) <= 2 and [w for w, *_ in c.turns] == [0, 1][: len(c.turns)]
        assert c.end == "rounds" or c.turns[-1][3] != "break" or c.used >= c.budget


def test_protocol_default_is_text_for_paragraph_schedules_on_every_engine():
    for engine in ("hf", "vllm", "vllm-server"):  # issue 32: --engine vllm defaulted to stream
        assert EvalConfig.from_keys(mode="handoff", engine=engine).handoff_protocol == "text"
        assert EvalConfig.from_keys(mode="handoff", engine=engine,
                                    schedule="paragraph-bernoulli").handoff_protocol == "text"
        assert EvalConfig.from_keys(mode="handoff", engine=engine, protocol="stream").handoff_protocol == "stream"
    assert EvalConfig.from_keys(mode="handoff", schedule="word").handoff_protocol == "stream"
    assert EvalConfig.from_keys(mode="solo").handoff_protocol is None
    with pytest.raises(TandemError, match="--protocol stream"):
        EvalConfig.from_keys(mode="handoff", schedule="word", protocol="text")


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("xt")
    out = []
    for name, vocab, seed in (("senior", 300, 0), ("other", 280, 1)):
        t = make_tokenizer(vocab)
        make_model(len(t), seed, hidden=32, layers=1).save_pretrained(root / name)
        t.save_pretrained(root / name)
        out.append(str(root / name))
    data = root / "probs.jsonl"
    data.write_text("".join(json.dumps({"problem": p.problem, "answer": "12"}) + "\n" for p in PROBLEMS))
    return out + [str(data)]


def test_stream_protocol_refuses_another_vocabulary_naming_protocol_text(capsys, dirs, tmp_path):
    senior, other, data = dirs
    rc = main(["eval", "handoff", "--senior", senior, "--junior", other, "--protocol", "stream", "--benchmarks", data,
               "--n", "1", "--max-tokens", "4", "--out", str(tmp_path / "ev")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.splitlines()) == 1 and "--protocol text" in err, err
    assert not (tmp_path / "ev").exists()


def test_text_protocol_command_resumes_to_the_same_rows(dirs, tmp_path):
    senior, other, data = dirs
    argv = ["eval", "handoff", "--senior", senior, "--junior", other, "--benchmarks", data, "--n", "2",
            "--max-tokens", "24", "--template", "plain", "--out", str(tmp_path / "ev")]
    assert main(argv) == 0
    path = tmp_path / "ev" / "samples.jsonl"
    first = path.read_text().splitlines()
    assert json.loads((tmp_path / "ev" / "config.json").read_text())["schedule"]["protocol"] == "text"
    assert all(json.loads(r)["turns"] for r in first)
    assert main(argv) == 0 and path.read_text().splitlines() == first  # a finished run re-run is a no-op
    path.write_text("\n".join(first[:-3]) + "\n")  # the last problem lost, the one before torn in half
    assert main(argv) == 0
    again = path.read_text().splitlines()
    assert sorted(map(exact_row, again)) == sorted(map(exact_row, first))  # resumed, the same text from the same seeds
    lps = lambda lines: sorted(json.loads(x)["junior_lp_sum"] for x in lines)  # noqa: E731
    assert lps(again) == pytest.approx(lps(first), abs=1e-4)  # float sums depend on the batch's padding


def test_a_text_run_refuses_to_resume_as_stream(capsys, dirs, tmp_path):
    senior, _, data = dirs
    argv = ["eval", "handoff", "--senior", senior, "--junior", senior, "--benchmarks", data, "--n", "1", "--max-tokens",
            "6",
            "--out", str(tmp_path / "ev")]
    assert main(argv) == 0
    assert main(argv + ["--protocol", "stream"]) == 2
    err = capsys.readouterr().err
    assert "existing run has a different schedule" in err and len(err.strip().splitlines()) == 1, err


def test_a_stream_run_made_under_the_old_default_resumes_in_stream(dirs, tmp_path):
    # A paragraph run whose config.json records no protocol (made in-stream: the old --engine vllm default, or
    # an explicit --protocol stream) resumes in-stream without --protocol, as it was made, not refused as text.
    senior, _, data = dirs
    argv = ["eval", "handoff", "--senior", senior, "--junior", senior, "--benchmarks", data, "--n", "2", "--max-tokens",
            "6",
            "--out", str(tmp_path / "ev")]
    assert main(argv + ["--protocol", "stream"]) == 0
    assert "protocol" not in json.loads((tmp_path / "ev" / "config.json").read_text())["schedule"]
    path = tmp_path / "ev" / "samples.jsonl"
    first = path.read_text().splitlines()
    path.write_text("\n".join(first[:-2]) + "\n")  # the last problem lost
    assert main(argv) == 0
    again = path.read_text().splitlines()
    assert sorted(again) == sorted(first) and not any("turns" in json.loads(r) for r in again)


def test_the_server_engine_asks_for_protocol_stream_before_any_request(capsys, dirs, tmp_path):
    senior, _, data = dirs
    rc = main(["eval", "handoff", "--senior", senior, "--engine", "vllm-server", "--server", "http://127.0.0.1:9",
               "--benchmarks", data, "--n", "1", "--out", str(tmp_path / "ev")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "pass --protocol stream" in err, err


def test_text_protocol_refuses_the_server_engine_in_one_line(dirs):
    from tandem_rlvr.eval.sample.text_handoff import open_text_handoff

    senior, _, data = dirs
    cfg = EvalConfig.from_keys(senior=senior, mode="handoff", benchmarks=[data], engine="vllm-server", protocol="text")
    with pytest.raises(TandemError, match=r"--engine hf or vllm \(got vllm-server\)") as e:
        open_text_handoff(cfg, "paragraph-roundrobin")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("p,author", [(1.0, 0), (0.0, 1)])
def test_bernoulli_turns_follow_the_coin_at_its_extremes(cross_pair, p, author):
    s, ts, j, tj = cross_pair
    sp = SamplingParams(0.0, 1.0, 0, 60)
    th = TextHandoff(TurnModel(s, ts, sp, "plain"), TurnModel(j, tj, sp, "plain"), "paragraph-bernoulli", p=p,
                     max_new_tokens=60)
    chains = [th.new_chain(q, 0, 3, TASK) for q in PROBLEMS]
    th.run(chains)
    assert {w for c in chains for w, *_ in c.turns} == {author}
    assert th.describe()["p"] == p and th.describe()["protocol"] == "text"


def test_one_generate_call_per_turn_for_every_live_chain(cross_pair):
    th = handoff(cross_pair)
    calls = []
    for m in th.pair:
        real = m.decoder.generate
        m.decoder.generate = lambda prompts, seeds, max_new_tokens, real=real: calls.append(len(prompts)) or real(
            prompts, seeds, max_new_tokens=max_new_tokens)
    chains = [th.new_chain(p, k, 40 + k, TASK) for p in PROBLEMS for k in range(2)]
    th.run(chains)
    # round-robin: every chain's i-th turn falls in the same (round, author) slot, so one call each
    assert len(calls) == max(len(c.turns) for c in chains)
    assert calls == [sum(len(c.turns) > i for c in chains) for i in range(len(calls))]


def test_replay_validates_text_runs_turn_by_turn_and_catches_doctored_traces(capsys, dirs, tmp_path):
    senior, other, data = dirs
    assert main(["eval", "handoff", "--senior", senior, "--junior", other, "--benchmarks", data, "--n", "2",
                 "--max-tokens", "40", "--template", "plain", "--out", str(tmp_path / "ev")]) == 0
    assert main(["eval", "replay", str(tmp_path / "ev")]) == 0
    assert "traces agree with the schedule" in capsys.readouterr().out
    path = tmp_path / "ev" / "samples.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    multi = 0

    def split_first_turn(r):  # the senior's turn cut in two: the second half given to the junior, the cut not a break
        t = r["turns"][0]
        half = len(t["text"]) // 2
        r["turns"][:1] = [{**t, "text": t["text"][:half], "end": "eos"}, {**t, "text": t["text"][half:],
                                                                         "author": "junior"}]

    for doctor, kind in [
        (lambda r: r["turns"][0].update(author="junior"), "turn 0 written by the junior; the schedule says senior"),
        (lambda r: r.update(response=r["response"] + "x"), "do not make the response"),
        (split_first_turn, "turn 0 ended (eos) before a paragraph break"),
        (lambda r: r.update(senior_mask=[0] * len(r["senior_mask"])), "senior mask differ"),
    ]:
        bad = json.loads(json.dumps(rows))
        doctor(bad[multi])
        path.write_text("".join(json.dumps(r) + "\n" for r in bad))
        assert main(["eval", "replay", str(tmp_path / "ev")]) == 2
        out, err = capsys.readouterr()
        assert kind in out and f"1 of {len(rows)} traces are invalid" in err, (out, err)
