"""``--ce-protocol paper``: the junior reads the response text with its own tokenizer; checked
against a few lines of plain torch, with a junior of another vocabulary, the 4088 cut and the
paper's averaging order (samples -> benchmark -> macro over benchmarks)."""

import json

import pytest
import torch

from tandem_rlvr.cli import main
from tandem_rlvr.eval.measure import legibility_text

from conftest import make_model, make_tokenizer


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("lp")
    for name, vocab, seed in (("senior", 300, 0), ("junior", 280, 1)):
        t = make_tokenizer(vocab)
        make_model(len(t), seed, hidden=32, layers=1).save_pretrained(root / name)
        t.save_pretrained(root / name)
    for b, qs in (("alpha", ["Mia has 7 shells.", "Tom buys 3 apples."]), ("beta", ["Leo has 9 cards."])):
        (root / f"{b}.jsonl").write_text("".join(json.dumps({"problem": q, "answer": "1"}) + "\n" for q in qs))
    benches = f"{root / 'alpha.jsonl'},{root / 'beta.jsonl'}"
    assert main(["eval", "solo", "--senior", str(root / "senior"), "--benchmarks", benches, "--n", "3",
                 "--max-tokens", "12", "--template", "plain", "--out", str(root / "solo")]) == 0
    return root


def _plain_ce(model, tok, prompt: str, response: str) -> tuple[float, int]:
    """Mean -log p of the response's tokens after the prompt's, one unpadded forward; and their count."""
    full, head = tok.encode(prompt + response), tok.encode(prompt)
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([full])).logits[0].double(), -1)
    nll = [-float(logp[t - 1, full[t]]) for t in range(len(head), len(full))]
    return sum(nll) / len(nll), len(nll)


def test_paper_ce_matches_plain_torch_across_tokenizers_in_the_papers_order(setup, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "leg"
    assert main(["eval", "legibility", "--samples", str(setup / "solo"), "--junior", str(setup / "junior"),
                 "--out", str(out)]) == 0
    res = json.loads((out / "legibility.json").read_text())
    assert res["config"]["ce_protocol"] == "paper" and not res["config"]["same_vocab"]
    assert "alpha" not in res["summary"] and res["dropped"] == {"4088": 0, "context": 0}
    jm = AutoModelForCausalLM.from_pretrained(setup / "junior").eval()
    jt = AutoTokenizer.from_pretrained(setup / "junior")
    rows = [json.loads(x) for x in (setup / "solo" / "samples.jsonl").read_text().splitlines()]
    problems = _problems(setup)
    per_sample = {(s["benchmark"], s["problem_id"], s["sample_idx"]): s
                  for s in map(json.loads, (out / "per_sample.jsonl").read_text().splitlines())}
    by_bench = {}
    for r in rows:
        q = problems[(r["benchmark"], r["problem_id"])]
        s = per_sample[(r["benchmark"], r["problem_id"], r["sample_idx"])]
        if not r["response"]:
            continue
        ce, n = _plain_ce(jm, jt, s_prompt(q), r["response"])
        assert s["ce"] == pytest.approx(ce, abs=1e-4) and s["tokens"] == n
        assert s["ce_per_char"] == pytest.approx(ce * n / len(r["response"]), abs=1e-4)
        by_bench.setdefault(r["benchmark"], []).append(ce)
    means = {b: sum(v) / len(v) for b, v in by_bench.items()}  # over samples, not problems
    for b, m in means.items():
        assert res["summary"]["ce"][b]["mean"] == pytest.approx(m, abs=1e-4)
    assert res["summary"]["ce"]["macro"]["mean"] == pytest.approx(sum(means.values()) / len(means), abs=1e-4)


def s_prompt(problem: str) -> str:
    return problem + "\n\n"  # the plain template


def test_chains_at_the_cut_are_dropped_and_counted(setup, tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    jt = AutoTokenizer.from_pretrained(setup / "junior")
    rows = [json.loads(x) for x in (setup / "solo" / "samples.jsonl").read_text().splitlines()]
    problems = _problems(setup)
    lens = sorted(len(jt.encode(s_prompt(problems[(r["benchmark"], r["problem_id"])]) + r["response"])) for r in rows)
    cut = lens[len(lens) // 2]
    monkeypatch.setattr(legibility_text, "CUT", cut)
    assert main(["eval", "legibility", "--samples", str(setup / "solo"), "--junior", str(setup / "junior"),
                 "--out", str(tmp_path / "leg")]) == 0
    res = json.loads((tmp_path / "leg" / "legibility.json").read_text())
    assert res["dropped"]["4088"] == sum(n >= cut for n in lens)
    assert res["scored_samples"] == sum(n < cut for n in lens)


def _problems(root) -> dict:
    """{(benchmark, problem_id): problem text} of the two files, as the loader names them."""
    from tandem_rlvr.data.benchmarks import load_file

    return {(p.benchmark, str(p.problem_id)): p.problem for b in ("alpha", "beta")
            for p in load_file(root / f"{b}.jsonl", benchmark=b)}


def test_ids_protocol_refuses_another_vocabulary_naming_the_paper_protocol(setup, tmp_path, capsys):
    rc = main(["eval", "legibility", "--samples", str(setup / "solo"), "--junior", str(setup / "junior"),
               "--ce-protocol", "ids", "--out", str(tmp_path / "leg")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "--ce-protocol paper" in err, err


def test_compare_tells_legibility_of_the_two_protocols_apart():
    from tandem_rlvr.eval.measure.comparable import legibility_differences

    same = {"grpo": {"junior": "j", "ce_protocol": "paper"}, "tandem": {"junior": "j", "ce_protocol": "paper"}}
    assert legibility_differences(same) == []
    older = {"grpo": {"junior": "j", "ce_protocol": "paper"}, "tandem": {"junior": "j"}}  # before the flag: ids
    (line,) = legibility_differences(older)
    assert "--ce-protocol (paper vs ids)" in line
