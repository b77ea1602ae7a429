"""How a problem becomes a prompt: one definition, recorded in every output.

- ``plain``: the problem, then a blank line (the tiny world's training format; also a
  reasonable default for base models).
- ``chat``: the tokenizer's chat template with one user turn, the problem followed by the
  paper's instruction to reason step by step and box the final answer; Qwen3 templates get
  ``enable_thinking=False`` (the paper uses Qwen3-4B-Instruct-2507, a non-thinking model).
- ``auto``: ``chat`` when the tokenizer has a chat template, else ``plain``.
"""

from __future__ import annotations

from .errors import TandemError

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
TEMPLATES = ("auto", "plain", "chat")


def resolve_template(tokenizer, template: str) -> str:
    if template not in TEMPLATES:
        raise TandemError(f"unknown prompt template {template!r}; valid: {', '.join(TEMPLATES)}")
    if template == "auto":
        return "chat" if getattr(tokenizer, "chat_template", None) else "plain"
    if template == "chat" and not getattr(tokenizer, "chat_template", None):
        raise TandemError(f"tokenizer {getattr(tokenizer, 'name_or_path', '?')} has no chat template; use --template plain")
    return template


def format_prompt(tokenizer, problem: str, template: str = "auto", instruction: str = INSTRUCTION) -> str:
    """The prompt text for ``problem`` under ``template`` (see module docstring)."""
    template = resolve_template(tokenizer, template)
    if template == "plain":
        return problem + "\n\n"
    messages = [{"role": "user", "content": f"{problem}\n\n{instruction}" if instruction else problem}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)


def encode_prompt(tokenizer, text: str) -> list[int]:
    """Token ids of an already formatted prompt (no extra special tokens: templates carry their own)."""
    return tokenizer.encode(text, add_special_tokens=False)
