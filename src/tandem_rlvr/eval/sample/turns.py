"""What ``TextHandoff`` needs of one model, whichever engine runs it (``--protocol text``).

``TurnEngine`` is a model's side of the text-level handoff: its tokenizer, prompt template,
context and ``turns``; ``turn_result`` derives a turn's text and end from the ids the model
generated. ``text_handoff.TurnModel`` (hf) and ``text_handoff_vllm.VLLMTurnModel`` implement it,
so the chain bookkeeping in ``text_handoff`` does not know which engine wrote a turn.
"""

from __future__ import annotations

from ...prompting import encode_prompt
from ...tasks import prompt_text

BREAK = "\n\n"


class TurnEngine:
    """One model of the pair as ``TextHandoff`` uses it; the engines differ only in ``turns``.

    Subclasses set ``tokenizer``, ``template`` (resolved for that tokenizer) and ``context``
    (the model's context in tokens, or None), and implement ``turns``."""

    tokenizer: object
    template: str
    context: int | None

    def prompt(self, problem, task) -> str:
        return prompt_text(self.tokenizer, task, problem, self.template)

    def encode(self, text: str) -> list[int]:
        return encode_prompt(self.tokenizer, text)

    def turns(self, prompts: list[list[int]], seeds: list[int], caps: list[int]) -> list[tuple[str, int, str, float]]:
        """One turn of each row (prompt ids, turn seed, cap in new tokens): (text, tokens generated,
        end in "break" | "eos" | "length", the sum of the generated tokens' log-probs under this
        model's temperature-scaled distribution); see ``turn_result``."""
        raise NotImplementedError

    def close(self) -> None:
        """Free the model's engine (nothing to do on --engine hf)."""


def turn_result(tokenizer, toks: list[int], eos: bool, logprob: float) -> tuple[str, int, str, float]:
    """A turn from the ids its model generated: the text is their decoding (special tokens
    skipped) cut after the first paragraph break, if any; ``eos``: the model ended its answer.
    Both engines derive a turn's text and end here, from token ids alone."""
    text = tokenizer.decode(toks, skip_special_tokens=True)
    cut = text.find(BREAK)
    if eos:
        return text, len(toks), "eos", logprob
    if cut >= 0:
        return text[: cut + len(BREAK)], len(toks), "break", logprob
    return text, len(toks), "length", logprob
