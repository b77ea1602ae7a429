"""Decoding: how a senior and a junior co-write one response per row, token by token.

``tandem`` is the batched two-cache decoder (``TandemDecoder.generate -> Rollout``: tokens,
senior mask, log-probs); ``schedule`` decides who writes each token (the registry of handoff
schedules and their boundary sets); ``sampling`` turns logits into tokens from explicit
uniforms, which ``rng`` derives from (row seed, step), so a row is reproducible from its seed;
``lean`` is the framework-free one-token step for Llama-family bodies and ``kvcache`` the
in-place KV cache it writes; ``reference`` is the slow, obviously-correct decoder the fast one
is tested against; ``render`` shows a response by author.
"""
