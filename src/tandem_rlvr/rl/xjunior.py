"""Training with a junior of another tokenizer (``tandem train --junior X`` where X's vocabulary is
not the senior's): the checks made before any model loads, and the junior's prompts.

Rollouts then hand off at text level, word by word (``decoding.xtandem``, ``engines.hf``); the
senior's sequence, its mask and the GRPO loss mean what they mean with a same-tokenizer junior.
What needs the junior to read the senior's ids is refused or skipped: KL-Reg (its reference is
the junior, scored on the senior's ids) is refused, and the KL-to-junior monitoring
(``kl_every``) is skipped (in a pool: for the rows of such juniors). Cross-tokenizer rollouts run
on ``--engine hf`` only for now (docs/cross_tokenizer.md).
"""

from __future__ import annotations

import logging

from ..errors import TandemError

log = logging.getLogger("tandem_rlvr")


def checked_tokenizers(cfg) -> tuple[tuple, tuple, tuple[bool, ...]]:
    """(the pair's tokenizers as ``load_tokenizers`` gives them, each junior's in pool order, whether each
    junior has another tokenizer than the senior): every tokenizer loaded once, then ``other_tokenizers``'
    refusals. ``rl.prepare`` reads them on; ``tandem train --dry-run`` only checks."""
    from ..models import load_pool_tokenizers, load_tokenizers

    m = cfg.models
    tokenizers = load_tokenizers(m.senior, m.pool.names[0])
    juniors = (tokenizers[1], *load_pool_tokenizers(m.pool.names[1:]))
    return tokenizers, juniors, other_tokenizers(cfg, tokenizers[0], juniors)


def other_tokenizers(cfg, senior_tokenizer, junior_tokenizers: tuple) -> tuple[bool, ...]:
    """Whether each junior of the run's pool (``junior_tokenizers``: each junior's tokenizer in pool order,
    loaded once by ``rl.prepare``, which ``load_pair`` and ``load_pool_juniors`` then read) has a tokenizer
    other than the senior's; a TandemError, before any model loads, for what cannot train with one
    (engine, method, schedule). A pool may mix both kinds (docs/pool.md): its other-tokenizer juniors
    hand off at text level, the others token by token."""
    from ..engines.base import engine_kind

    m, r = cfg.models, cfg.rollout
    if not m.junior:  # self-paired: the senior's own tokenizer
        return (False,) * len(junior_tokenizers)
    vocab = senior_tokenizer.get_vocab()
    other = tuple(t.get_vocab() != vocab for t in junior_tokenizers)
    names = [n for n, o in zip(m.pool.names, other, strict=True) if o]
    if not names:
        return other
    from ..decoding.schedule import schedule_kind, schedule_names

    who = f"junior {names[0]}" + ("" if m.pool.single else " of the pool")
    if not engine_kind(r.engine).transformers:
        raise TandemError(f"{who} has another tokenizer than the senior: cross-tokenizer training "
                          f"runs on --engine hf only for now, not {r.engine} (docs/cross_tokenizer.md)")
    if cfg.method_kind.reference is not None:
        raise TandemError(f"{who} has another tokenizer than the senior: KL-Reg scores the senior's "
                          "ids under the junior, which needs one vocabulary")
    if cfg.method_kind.junior_in_rollout and not schedule_kind(cfg.rollout_schedule).cross_tokenizers:
        raise TandemError(f"{who} has another tokenizer than the senior: schedule {cfg.rollout_schedule!r} cannot "
                          "hand off between tokenizers; "
                          f"valid: {', '.join(schedule_names(lambda k: k.cross_tokenizers))}")
    log.info("junior(s) %s have another tokenizer: their rollouts hand off at text level, word by word",
             ", ".join(names))
    return other


def attach_junior_prompts(prep) -> None:
    """Give every junior of another tokenizer (``prep.pair.xjunior``, a pool's ``prep.pair.xjuniors``) its
    prompt of every training and validation problem (its own template), keyed by the senior's prompt ids;
    both templates plain: the same text, re-encoded."""
    from ..prompting import encode_prompt, resolve_template
    from ..tasks import prompt_text

    # a pool's first is pair.xjunior
    seen = {id(x): x for x in (prep.pair.xjunior, *prep.pair.xjuniors) if x is not None}
    for xj in seen.values():
        template = resolve_template(xj.tokenizer, prep.cfg.data.template)
        if template == prep.template == "plain":
            continue
        xj.prompts = {tuple(encode_prompt(prep.pair.tokenizer, prep.prompt_text(p))):
                      encode_prompt(xj.tokenizer, prompt_text(xj.tokenizer, prep.task, p, template))
                      for p in [*prep.train, *prep.val]}
