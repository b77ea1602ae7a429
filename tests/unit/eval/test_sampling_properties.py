"""What a user sees of sampling: independent draws per problem, and every end-of-sequence id honoured.

- The n samples of one problem (``tandem eval solo --n 400 --max-tokens 1``) are independent
  draws from the model's next-token distribution: not copies of one another, and each
  token's frequency within a binomial bound of its probability, which is computed here by a
  plain forward of the saved model on the plain-template prompt (the problem, a blank line).
- End-of-sequence ids given as a list in ``generation_config.json`` (as Qwen and Llama-3
  instruct models ship them) each end a sample: no sample continues past either id, and both
  ids end some samples.
"""

import json
import math
import shutil

import numpy as np
import torch
from scipy import stats
from transformers import AutoModelForCausalLM, GenerationConfig

from tandem_rlvr.cli import main


PROBLEM = "Mia has 7 shells."
TEMPERATURE = 0.5  # the sharpened random model: 8 tokens with n p >= 5 at n = 400 (top one 0.45)


def _first_token_probs(model_dir, tok) -> np.ndarray:
    """(V,) next-token probabilities after the plain prompt, at TEMPERATURE, by one plain forward."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = torch.tensor([tok.encode(PROBLEM + "\n\n", add_special_tokens=False)])
    with torch.no_grad():
        logits = model(ids).logits[0, -1].double()  # (V,)
    return torch.softmax(logits / TEMPERATURE, -1).numpy()


def _run(tmp_path, senior, n, max_tokens):
    bench = tmp_path / "one.jsonl"
    bench.write_text(json.dumps({"id": "0", "problem": PROBLEM, "answer": "7"}) + "\n")
    out = tmp_path / "run"
    rc = main(["eval", "solo", "--senior", str(senior), "--benchmarks", str(bench), "--n", str(n), "--template",
               "plain",
               "--temperature", str(TEMPERATURE), "--top-p", "1", "--top-k", "0", "--max-tokens", str(max_tokens),
               "--out", str(out)])
    assert rc == 0
    return [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]


def test_the_n_samples_of_a_problem_are_independent_draws(tmp_path, chat_models, tok):
    n = 400
    probs = _first_token_probs(chat_models["a"], tok)
    rows = _run(tmp_path, chat_models["a"], n, 1)
    first = np.array([r["token_ids"][0] for r in rows])
    counts = np.bincount(first, minlength=probs.size)
    assert len(rows) == n and len(set(first.tolist())) > 5 and counts.max() < 0.9 * n  # not copies of one draw
    big = probs * n >= 5
    for v in np.flatnonzero(big):  # each frequent token within 4.5 binomial SDs of n p
        sd = math.sqrt(n * probs[v] * (1 - probs[v]))
        assert abs(counts[v] - n * probs[v]) <= 4.5 * sd, (v, counts[v], n * probs[v])
    rest_p = probs[~big].sum()  # the rare tokens pooled
    assert abs(counts[~big].sum() - n * rest_p) <= 4.5 * math.sqrt(n * rest_p * (1 - rest_p))
    observed = np.append(counts[big], counts[~big].sum())
    expected = np.append(probs[big], rest_p) * n
    assert stats.chisquare(observed, expected).pvalue > 1e-3


def test_every_end_of_sequence_id_listed_in_the_generation_config_ends_a_sample(tmp_path, chat_models, tok):
    senior = tmp_path / "senior"
    shutil.copytree(chat_models["a"], senior)
    probs = _first_token_probs(senior, tok)
    probs[tok.eos_token_id] = 0
    x, y = (int(v) for v in np.argsort(-probs)[:2])  # the two likeliest first tokens become EOS ids
    GenerationConfig(eos_token_id=[x, y], pad_token_id=tok.pad_token_id).save_pretrained(senior)
    rows = _run(tmp_path, senior, 64, 6)
    ended = {x: 0, y: 0}
    for r in rows:
        ids = r["token_ids"]
        stops = [i for i, t in enumerate(ids) if t in (x, y, tok.eos_token_id)]
        if stops:
            assert stops[0] == len(ids) - 1 and r["finished"], ids  # nothing after the first end id
            if ids[-1] in ended:
                ended[ids[-1]] += 1
        else:
            assert len(ids) == 6 and not r["finished"]
    assert ended[x] > 0 and ended[y] > 0, ended
