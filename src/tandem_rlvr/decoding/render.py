"""Turn (tokens, senior mask) into text segments by author, for terminals and HTML."""

from __future__ import annotations


def author_segments(tokenizer, tokens: list[int], senior_mask: list[int]) -> list[tuple[str, bool]]:
    """Split a response into maximal runs of one author: [(text, is_senior), ...].

    Text is decoded incrementally from the whole prefix, so multi-byte characters split
    across tokens land in the run of the token that completes them.
    """
    segments: list[tuple[str, bool]] = []
    prev = ""
    for i, flag in enumerate(senior_mask):
        text = tokenizer.decode(tokens[: i + 1], skip_special_tokens=True)
        piece, prev = text[len(prev):] if text.startswith(prev) else text, text
        if not piece:
            continue
        if segments and segments[-1][1] == bool(flag):
            segments[-1] = (segments[-1][0] + piece, bool(flag))
        else:
            segments.append((piece, bool(flag)))
    return segments
