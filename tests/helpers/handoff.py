"""The text-level handoff's shared inputs: the math task's prompts and verdicts, four problems, tiny models fitted
a few steps on the fixture text (so greedy turns write sentences and paragraph breaks), a ``TextHandoff`` over
the ``cross_pair`` fixture (tests/conftest.py), and a row without its float sums."""

import json

import torch

from tandem_rlvr.data.benchmarks import Problem
from tandem_rlvr.decoding.sampling import SamplingParams
from tandem_rlvr.eval.sample.text_handoff import TextHandoff, TurnModel
from tandem_rlvr.tasks import task_for_eval

from conftest import TEXT

TASK = task_for_eval("math", instruction="none", answer_mode="last-box")  # the prompts and verdicts of these tests

PROBLEMS = [Problem("t", str(i), q, "12") for i, q in
            enumerate(["Mia has 7 shells.", "Tom buys 3 apples", "Leo has 9 cards.", "She finds 5"])]


def fit(model, tok, steps):
    """A few full-batch steps on the fixture text, so greedy turns write sentences and paragraph breaks."""
    torch.manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batch = tok(TEXT[:3], return_tensors="pt", padding=True, padding_side="right")
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    model.train()
    for _ in range(steps):
        loss = model(**batch, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval().requires_grad_(False)


def handoff(cross_pair, budget=80, **kw):
    """A paragraph-roundrobin ``TextHandoff`` of the ``cross_pair`` fixture, greedy, ``budget`` new tokens."""
    s, ts, j, tj = cross_pair
    sp = SamplingParams(0.0, 1.0, 0, budget)
    return TextHandoff(TurnModel(s, ts, sp, "plain"), TurnModel(j, tj, sp, "plain"), "paragraph-roundrobin",
                       max_new_tokens=budget, **kw)


def exact_row(line: str) -> str:
    """A row without its log-prob sums (floats that vary in the last digits with the batch)."""
    row = json.loads(line)
    row.pop("junior_lp_sum")
    for t in row["turns"]:
        t.pop("logprob_sum")
    return json.dumps(row, sort_keys=True)
