"""A junior pool's draw and the independent check of a pool evaluation's rows (the pool tests on vLLM and on a
served pool): ``draw`` recomputes the pool's seeded junior from sha256 of a row seed; each greedy ``word`` row
is what the reference decoder (``reference.decoder``: one row, full prefix every step, its own sampler and
boundary set) writes with the junior its seed draws, the models loaded here by transformers."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import torch

from reference.decoder import reference_boundary_ids, reference_generate
from tandem_rlvr.decoding.sampling import SamplingParams
from tandem_rlvr.models import eos_ids
from tandem_rlvr.prompting import encode_prompt, plain_prompt


def draw(weights, row_seed: int) -> int:
    """The pool's inverse-CDF draw for a sample, from sha256 of its row seed (step, prompt, rollout = 0)."""
    d = hashlib.sha256(f"tandem-junior-pool|{row_seed}|0|0|0".encode()).digest()
    u = int.from_bytes(d[:8], "big") / 2**64
    return int(np.searchsorted(np.cumsum(weights)[:-1], u, side="right"))


PROBLEMS = [f"Mia has {7 ** i} shells. She finds 5 more." for i in range(3)]


def write_bench(path):
    """A benchmark file of ``PROBLEMS`` (ids 0..2)."""
    path.write_text("".join(json.dumps({"id": str(i), "problem": p, "answer": "12"}) + "\n"
                            for i, p in enumerate(PROBLEMS)))
    return path


def _load(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()


@torch.no_grad()
def check_rows_against_reference(rows, tok, senior: str, juniors: list[str], K: int, max_tokens: int) -> None:
    """Each row (``samples.jsonl``, a pool of ``juniors`` with equal weights, template plain) names the junior
    its seed draws and equals, tokens and senior mask, the reference decode with that junior; both juniors
    were drawn, and on some row drawn to the second the first would have written otherwise."""
    s_model, j_models = _load(senior), [_load(j) for j in juniors]
    eos = eos_ids(tok, s_model.generation_config)
    boundary = reference_boundary_ids(tok, "word")
    greedy = SamplingParams(temperature=0.0, max_new_tokens=max_tokens)
    drawn, routed = set(), False
    for r in rows:
        j = draw([0.5] * len(juniors), r["seed"])
        assert r["junior"] == juniors[j], r
        drawn.add(j)
        prompt = encode_prompt(tok, plain_prompt(PROBLEMS[int(r["problem_id"])]))
        toks, flags, _ = reference_generate(s_model, j_models[j], "word", greedy, prompt, r["seed"], eos, boundary,
                                            p=0.5, K=K)
        assert r["token_ids"] == toks, (r["problem_id"], r["sample_idx"])
        assert [int(x) for x in r["senior_mask"]] == [int(f) for f in flags], (r["problem_id"], r["sample_idx"])
        if j == 1 and not routed:
            other, _, _ = reference_generate(s_model, j_models[0], "word", greedy, prompt, r["seed"], eos, boundary,
                                             p=0.5, K=K)
            routed = other != toks
    assert drawn == set(range(len(juniors))), drawn
    assert routed, "no row drawn to the second junior would differ with the first: the routing is unchecked"
