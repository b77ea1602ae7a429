"""End to end: the mask TRL multiplies into the loss marks exactly the tokens the senior wrote.

Authorship is recomputed without the decoder or the schedule: every response token is
teacher-forced through both models (plain full-prefix forwards at the rollout temperature 0.6),
and the token's author is the model whose log-prob equals the one the rollout recorded. That
author must agree with TRL's loss mask (completion_mask x tool_mask) position by position,
first token, last token and EOS included, and the mask must be 0 past the response. The two
models get an EOS logit near their top logit so that many rows end with EOS.
"""

import json

import pytest
import torch

from tandem_rlvr.rl.assemble import build_run

from conftest import make_model
from helpers.train import first_batch, train_cfg
TEMPERATURE = 0.6


@pytest.fixture(scope="module")
def eos_setup(tmp_path_factory, tok):
    root = tmp_path_factory.mktemp("mask")
    for name, seed in (("senior", 0), ("junior", 1)):
        model = make_model(len(tok), seed, hidden=32, layers=1)
        with torch.no_grad():  # EOS logit about the top logit: EOS is sampled often
            ids = torch.tensor([tok.encode("Mia has 7 shells. She finds 5 more. The answer is 12 because")])
            h = model.model(input_ids=ids).last_hidden_state[0]  # (S, H)
            top = (h @ model.lm_head.weight.T).max(-1).values.mean()
            d = h.mean(0)
            model.lm_head.weight[tok.eos_token_id] = d * (top + 0.5) / (h @ d).mean()
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
    data = root / "data.jsonl"
    data.write_text("".join(json.dumps({"problem": f"Mia has {i} shells. She finds 5 more.", "answer": str(i + 5)})
                            + "\n" for i in range(40)))
    return root, root / "senior", root / "junior", data


@torch.no_grad()
def _logps(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """(n,) log-probs of ``completion`` after ``prompt``: one full-prefix forward, logits / temperature."""
    ids = torch.tensor([prompt + completion])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float() / TEMPERATURE  # (n, V)
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion).unsqueeze(-1)).squeeze(-1)


def test_trl_loss_mask_equals_teacher_forced_authorship(eos_setup, tmp_path, tok):
    run = build_run(train_cfg(eos_setup, tmp_path, temperature=TEMPERATURE, max_new_tokens=16),
                    print_fn=lambda *_: None)
    outs = []
    inner = run.trainer.rollout_func

    def keep(prompts, trainer):
        outs.append(inner(prompts, trainer))
        return outs[-1]

    run.trainer.rollout_func = keep
    batch, _ = first_batch(run)
    recorded = {(tuple(p), tuple(c)): lp for p, c, lp in zip(outs[0]["prompt_ids"], outs[0]["completion_ids"],
                                                             outs[0]["logprobs"], strict=True)}
    assert len(recorded) == len(outs[0]["prompt_ids"])  # rows are told apart by their tokens
    senior, junior = run.prep.pair.senior, run.prep.pair.junior
    loss_mask = batch["completion_mask"] * batch["tool_mask"]  # (B, T): what TRL's loss multiplies in
    eos_rows = 0
    for b in range(batch["completion_ids"].shape[0]):
        n = int(batch["completion_mask"][b].sum())
        prompt = batch["prompt_ids"][b][batch["prompt_mask"][b].bool()].tolist()
        completion = batch["completion_ids"][b, :n].tolist()
        rec = torch.tensor(recorded[(tuple(prompt), tuple(completion))])  # (n,)
        by_senior = (_logps(senior, prompt, completion) - rec).abs() < 1e-4
        by_junior = (_logps(junior, prompt, completion) - rec).abs() < 1e-4
        assert bool((by_senior ^ by_junior).all()), f"row {b}: a token matches neither or both models"
        for t in range(n):  # position by position, first and last (EOS) included
            assert bool(loss_mask[b, t]) == bool(by_senior[t]), f"row {b} position {t} of {n}"
        assert not loss_mask[b, n:].any()
        eos_rows += completion[-1] == tok.eos_token_id
    assert 0 < eos_rows < batch["completion_ids"].shape[0]  # rows ending in EOS and rows cut at the length limit
    real = batch["completion_mask"].bool()
    assert 0 < float(loss_mask[real].float().mean()) < 1  # both authors wrote tokens
