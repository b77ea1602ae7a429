"""A judge model on our own engine: the local backend of ``rewards.judge.Judge``.

``open_judge(settings, cache)`` is how a run gets its judge: an ``http(s)://`` model is asked
through ``rewards.judge.EndpointBackend``; anything else (a directory, hub id, ``tiny``) is opened
here on the hf engine and decoded greedily in batches of ``settings.batch_size``, the template as
one user turn. It lives on the engines' floor because opening a model does; ``rewards`` below
never imports an engine.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..decoding.sampling import SamplingParams
from ..rewards.judge import Judge, JudgeSettings
from .base import EngineSetup, RolloutSpec, open_engine

log = logging.getLogger("tandem_rlvr")


def open_judge(settings: JudgeSettings, cache: str | Path | None = None) -> Judge:
    """The ``Judge`` of ``settings``: at its URL, or a local model on the hf engine."""
    return Judge(settings, cache=cache, backend=None if settings.endpoint else LocalJudgeBackend(settings))


class LocalJudgeBackend:
    """A local judge on our hf engine: the template as one chat user turn, greedy, in batches."""

    def __init__(self, s: JudgeSettings):
        self.settings = s
        greedy = SamplingParams(0.0, 1.0, 0, s.max_tokens)
        engine = open_engine("hf", EngineSetup(s.model, device=s.device, dtype=s.dtype))
        self.decoder = engine.decoder(RolloutSpec("senior", greedy))
        self.tok, self._close = engine.tokenizer, engine.close

    def complete(self, prompts: list[str]) -> list[str | None]:
        out: list[str | None] = []
        n = self.settings.batch_size
        for i in range(0, len(prompts), n):
            part = prompts[i:i + n]
            try:
                out += self._generate(part)
            except Exception as e:  # noqa: BLE001 (a judge failure is a logged zero, never a crash mid-run)
                log.warning("judge %s: a batch of %d failed (%s: %s); judging its rows one by one",
                            self.settings.model, len(part), type(e).__name__, str(e)[:200])
                out += [self._one(p) for p in part]  # one bad row (e.g. over the context) fails alone
        return out

    def _generate(self, prompts: list[str]) -> list[str]:
        from ..prompting import encode_prompt, format_prompt

        ids = [encode_prompt(self.tok, format_prompt(self.tok, p, "auto", "none")) for p in prompts]
        roll = self.decoder.generate(ids, [0] * len(ids))
        return [self.tok.decode(roll.row_tokens(b), skip_special_tokens=True) for b in range(len(ids))]

    def _one(self, prompt: str) -> str | None:
        try:
            return self._generate([prompt])[0]
        except Exception:  # noqa: BLE001 (already logged for its batch)
            return None

    def close(self) -> None:
        self._close()
