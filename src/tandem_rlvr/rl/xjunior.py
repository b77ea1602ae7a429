"""Training with a junior of another tokenizer (``tandem train --junior X`` where X's vocabulary is
not the senior's): the checks made before any model loads, and the junior's prompts.

Rollouts then hand off at text level, word by word (``decoding.xtandem``, ``engines.hf``); the
senior's sequence, its mask and the GRPO loss mean what they mean with a same-tokenizer junior.
What needs the junior to read the senior's ids is refused or skipped: KL-Reg (its reference is
the junior, scored on the senior's ids) is refused, and the KL-to-junior monitoring
(``kl_every``) is skipped. Cross-tokenizer rollouts run on ``--engine hf`` only for now
(docs/cross_tokenizer.md).
"""

from __future__ import annotations

import logging

from ..errors import TandemError

log = logging.getLogger("tandem_rlvr")


def other_tokenizer(cfg) -> bool:
    """Whether the run's junior has a tokenizer other than the senior's; a TandemError, before any
    model loads, for what cannot train with one (engine, method, schedule)."""
    from ..engines.base import engine_kind
    from ..models import load_tokenizer

    m, r = cfg.models, cfg.rollout
    if not m.pool.single:
        vocab = load_tokenizer(m.senior).get_vocab()
        for name in m.pool.names:
            if load_tokenizer(name).get_vocab() != vocab:
                raise TandemError(f"junior {name} of the pool has another tokenizer than the senior: a pool trains "
                                  "with juniors of the senior's tokenizer only for now (docs/pool.md)")
        return False
    if not m.junior or load_tokenizer(m.junior).get_vocab() == load_tokenizer(m.senior).get_vocab():
        return False
    from ..decoding.xtandem import CROSS_SCHEDULES

    if not engine_kind(r.engine).transformers:
        raise TandemError(f"junior {m.junior} has another tokenizer than the senior: cross-tokenizer training "
                          f"runs on --engine hf only for now, not {r.engine} (docs/cross_tokenizer.md)")
    if cfg.method == "klreg":
        raise TandemError(f"junior {m.junior} has another tokenizer than the senior: KL-Reg scores the senior's "
                          "ids under the junior, which needs one vocabulary")
    if cfg.method == "tandem" and r.schedule not in CROSS_SCHEDULES:
        raise TandemError(f"junior {m.junior} has another tokenizer than the senior: schedule {r.schedule!r} "
                          f"cannot hand off between tokenizers; valid: {', '.join(CROSS_SCHEDULES)}")
    log.info("junior %s has another tokenizer: rollouts hand off at text level, word by word", m.junior)
    return True


def attach_junior_prompts(prep) -> None:
    """Give ``prep.pair.xjunior`` the junior's prompt of every training and validation problem (its
    own template), keyed by the senior's prompt ids; both templates plain: the same text, re-encoded."""
    xj = prep.pair.xjunior
    if xj is None:
        return
    from ..prompting import encode_prompt, resolve_template
    from ..tasks import prompt_text

    template = resolve_template(xj.tokenizer, prep.cfg.data.template)
    if template == prep.template == "plain":
        return
    xj.prompts = {tuple(encode_prompt(prep.pair.tokenizer, prep.prompt_text(p))):
                  encode_prompt(xj.tokenizer, prompt_text(xj.tokenizer, prep.task, p, template))
                  for p in [*prep.train, *prep.val]}
