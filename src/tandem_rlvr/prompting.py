"""How a problem becomes a prompt: one definition, recorded in every output.

- ``plain``: the problem, then a blank line (the tiny world's training format; also a
  reasonable default for base models). No instruction.
- ``chat``: the tokenizer's chat template with one user turn: the problem, then the named
  instruction (``INSTRUCTIONS``) after its separator; Qwen3 templates get
  ``enable_thinking=False`` (the paper uses Qwen3-4B-Instruct-2507, a non-thinking model).
- ``auto``: ``chat`` when the tokenizer has a chat template, else ``plain``.

Instructions: ``paper`` (the default) is the paper's released code exactly: the problem, one
space, ``Solve the following math problem step by step. Put your final answer inside
\\boxed{}, like \\boxed{42} or \\boxed{\\frac{1}{2}}.``. ``reason-step`` is the common wording of
math evaluation harnesses (the problem, a blank line, "Please reason step by step ..."), which
runs recorded without an instruction used; ``none`` sends the problem alone.
"""

from __future__ import annotations

from .errors import TandemError

TEMPLATES = ("auto", "plain", "chat")
INSTRUCTIONS: dict[str, tuple[str, str]] = {
    # name: (separator after the problem, instruction text)
    "paper": (" ", "Solve the following math problem step by step. Put your final answer inside \\boxed{}, "
                   "like \\boxed{42} or \\boxed{\\frac{1}{2}}."),
    "reason-step": ("\n\n", "Please reason step by step, and put your final answer within \\boxed{}."),
    "none": ("", ""),
}
DEFAULT_INSTRUCTION = "paper"


def resolve_template(tokenizer, template: str) -> str:
    if template not in TEMPLATES:
        raise TandemError(f"unknown prompt template {template!r}; valid: {', '.join(TEMPLATES)}")
    if template == "auto":
        return "chat" if getattr(tokenizer, "chat_template", None) else "plain"
    if template == "chat" and not getattr(tokenizer, "chat_template", None):
        raise TandemError(f"tokenizer {getattr(tokenizer, 'name_or_path', '?')} has no chat template; "
                          "use --template plain")
    return template


def user_message(problem: str, instruction: str = DEFAULT_INSTRUCTION) -> str:
    """The chat user turn: ``problem`` + separator + the named instruction."""
    if instruction not in INSTRUCTIONS:
        raise TandemError(f"unknown prompt instruction {instruction!r}; valid: {', '.join(INSTRUCTIONS)}")
    sep, text = INSTRUCTIONS[instruction]
    return f"{problem}{sep}{text}"


def plain_prompt(problem: str) -> str:
    """The ``plain`` template: the problem, then a blank line (the tiny world's training format)."""
    return problem + "\n\n"


def format_prompt(tokenizer, problem: str, template: str = "auto", instruction: str = DEFAULT_INSTRUCTION) -> str:
    """The prompt text for ``problem`` under ``template`` and the named ``instruction`` (module docstring)."""
    content = user_message(problem, instruction)
    template = resolve_template(tokenizer, template)
    if template == "plain":
        return plain_prompt(problem)
    return tokenizer.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                         add_generation_prompt=True, enable_thinking=False)


def encode_prompt(tokenizer, text: str) -> list[int]:
    """Token ids of an already formatted prompt (no extra special tokens: templates carry their own)."""
    return tokenizer.encode(text, add_special_tokens=False)


def render_prompt(tokenizer, prompt) -> str:
    """The text a model reads for a dataset ``prompt``: a string as it is; a list of chat messages through
    ``tokenizer``'s chat template with the generation prompt (TRL's rendering of a conversational prompt)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(isinstance(m, dict) and "role" in m and "content" in m for m in prompt):
        if not getattr(tokenizer, "chat_template", None):
            raise TandemError(f"a conversational prompt needs a tokenizer with a chat template; "
                              f"{getattr(tokenizer, 'name_or_path', '?')} has none")
        return tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    raise TandemError(f"a prompt must be text or a list of chat messages ({{'role', 'content'}}), got "
                      f"{type(prompt).__name__}: {str(prompt)[:60]!r}")
