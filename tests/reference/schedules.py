"""Plain full-prefix generation under an author rule, and the reference decoder's own boundary set of a registered
schedule: the references the schedule tests compare the batched decoder, the vLLM logits processor and the
client's replay against (one row, the whole prefix recomputed per token, the reference sampler)."""

import torch

from tandem_rlvr.decoding import rng
from reference.decoder import reference_boundary_ids, reference_sample
from tandem_rlvr.decoding.schedule import REGISTRY


@torch.no_grad()
def plain_generate_by(senior, junior, author_of, sampling, prompt, seed, eos):
    """Full-prefix generation, one token at a time; ``author_of(toks)`` says whether the senior
    writes the next position, from the tokens so far (True: senior)."""
    ids, toks, flags = list(prompt), [], []
    for t in range(sampling.max_new_tokens):
        author = author_of(toks)
        model = senior if author else junior
        logits = model(torch.tensor([ids])).logits[0, -1].float()  # (V,)
        tok = reference_sample(logits, float(rng.uniform(torch.tensor([seed]), t, rng.SAMPLE)[0]), sampling)
        toks.append(tok)
        flags.append(author)
        if tok == eos:
            break
        ids.append(tok)
    return toks, flags


def boundary_ids(tok, name):
    """The reference's own boundary set for the rule of ``name`` (paragraph breaks: found on the text itself)."""
    fires = REGISTRY[name].rule.fires
    return reference_boundary_ids(tok, fires) if fires in ("word", "sentence", "blank-line-end") else set()
