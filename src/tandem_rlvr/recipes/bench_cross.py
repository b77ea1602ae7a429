"""What a junior of another tokenizer costs: ``tandem bench decode --junior X`` when X's vocabulary
is not the senior's.

Three decoders on the same prompts, seeds and thread budget N (every one runs its bodies one after
the other with N intra-op threads; the JSON's ``budget`` says so): the senior alone, same-tokenizer
tandem (``decoding.tandem``, word schedule, with ``--vs-junior``, default the senior itself) and
cross-tokenizer tandem (``decoding.xtandem``, word schedule, with X), both with its default catch-up
of one id per model and step and with whole segments in one forward (``chunk=None``). Every row emits exactly
``new_tokens`` tokens (EOS ignored), so tokens/s compare like for like; the cross decoder's rows
also report how many senior ids they hold (the junior's text re-tokenised) and how many ids each
model was fed (counted at the model's body, so a re-prefill would show).

Run: ``tandem bench decode --senior tiny --junior tiny-xjunior --vs-junior tiny-junior --json``.
"""

from __future__ import annotations

import torch

from ..decoding.sampling import SamplingParams
from ..decoding.schedule import make_schedule
from ..decoding.tandem import TandemDecoder
from ..decoding.xtandem import CrossTandemDecoder
from ..runtime import intra_op_threads
from .roofline import best_seconds


class FedCounter:
    """Counts the ids other than ``pad_id`` fed to a model after its prefill, at its input embedding
    (which the transformers forward and the lean step both call). Padding is the EOS id in the tiny
    worlds, and a row's EOS is never fed (the row ends there)."""

    def __init__(self, model, pad_id: int):
        self.calls, self.fed, self.pad = 0, 0, pad_id
        self.handle = model.get_decoder().embed_tokens.register_forward_pre_hook(self._count)

    def _count(self, module, args):
        if self.calls:  # the first call is the prefill
            self.fed += int((args[0] != self.pad).sum())
        self.calls += 1

    def close(self):
        self.handle.remove()


def bench_cross_decode(senior, same_junior, xjunior_model, xjunior, prompts: list[str], batch: int = 64,
                       new_tokens: int = 128, p: float = 0.5, repeats: int = 3, temperature: float = 1.0,
                       threads: int | None = None, progress=None) -> dict:
    """Tokens/s of solo, same-tokenizer tandem and cross-tokenizer tandem at an equal thread budget."""
    N = threads or torch.get_num_threads()
    tok = xjunior.senior_tokenizer
    enc = [tok.encode(prompts[i % len(prompts)]) for i in range(batch)]
    jenc = [xjunior.prompt_ids(e) for e in enc]
    seeds = list(range(batch))
    sp = SamplingParams(temperature=temperature, max_new_tokens=new_tokens)
    pad = tok.pad_token_id
    V = senior.config.vocab_size
    solo = TandemDecoder(senior, None, make_schedule("senior"), sp, eos_ids=[], pad_id=pad)
    same = TandemDecoder(senior, same_junior, make_schedule("word", tok, p=p, vocab_size=V), sp, eos_ids=[], pad_id=pad)
    cross = CrossTandemDecoder(senior, xjunior_model, tok, xjunior.tokenizer, "word", sp, [], [], p=p)
    whole = CrossTandemDecoder(senior, xjunior_model, tok, xjunior.tokenizer, "word", sp, [], [], p=p, chunk=None)
    cases = {"solo": lambda: solo.generate(enc, seeds), "tandem_same_tokenizer": lambda: same.generate(enc, seeds),
             "tandem_cross_tokenizer": lambda: cross.generate(enc, seeds, junior_prompts=jenc),
             "tandem_cross_whole_segments": lambda: whole.generate(enc, seeds, junior_prompts=jenc)}
    secs = {}
    with intra_op_threads(N):
        for fn in cases.values():  # warm-up
            fn()
        for name, fn in cases.items():
            secs[name] = best_seconds(fn, repeats)
            if progress:
                progress(name)
        counters = [FedCounter(senior, pad), FedCounter(xjunior_model, xjunior.tokenizer.pad_token_id)]
        try:
            roll = cross.generate(enc, seeds, junior_prompts=jenc)
        finally:
            for c in counters:
                c.close()
    toks = batch * new_tokens
    res = {f"{k}_tok_s": toks / v for k, v in secs.items()}
    senior_ids = int(roll.lengths.sum())
    res.update({
        "cross_over_same": res["tandem_cross_tokenizer_tok_s"] / res["tandem_same_tokenizer_tok_s"],
        "cross_over_solo": res["tandem_cross_tokenizer_tok_s"] / res["solo_tok_s"],
        "whole_segments_over_same": res["tandem_cross_whole_segments_tok_s"] / res["tandem_same_tokenizer_tok_s"],
        "same_over_solo": res["tandem_same_tokenizer_tok_s"] / res["solo_tok_s"],
        "cross_senior_ids_per_row": senior_ids / batch,
        "cross_senior_share": float(roll.senior_share.mean()),
        "cross_fed_per_row": {"senior": counters[0].fed / batch, "junior": counters[1].fed / batch},
        "batch": batch, "new_tokens": new_tokens, "p": p, "repeats": repeats, "threads": N, "lengths": "fixed",
        "device": str(next(senior.parameters()).device),
        "budget": {k: f"{N} intra-op thread{'s' if N != 1 else ''}, bodies in turn" for k in cases},
    })
    return res


def format_cross(res: dict) -> list[str]:
    """Human-readable lines of a ``bench_cross_decode`` result."""
    lines = [f"batch {res['batch']}, every row emits {res['new_tokens']} tokens; {res['device']}, budget "
             f"{res['threads']} thread(s), bodies in turn, for every decoder"]
    for k in ("solo", "tandem_same_tokenizer", "tandem_cross_tokenizer", "tandem_cross_whole_segments"):
        lines.append(f"  {k:28s} {res[k + '_tok_s']:10.0f} tok/s")
    fed = res["cross_fed_per_row"]
    lines.append(f"cross/same {res['cross_over_same']:.3f} (whole segments {res['whole_segments_over_same']:.3f}); "
                 f"cross/solo {res['cross_over_solo']:.3f}, same/solo {res['same_over_solo']:.3f}; "
                 f"cross rows hold {res['cross_senior_ids_per_row']:.1f} senior ids (senior share "
                 f"{res['cross_senior_share']:.2f}), fed per row: senior {fed['senior']:.1f}, "
                 f"junior {fed['junior']:.1f} ids")
    return lines
