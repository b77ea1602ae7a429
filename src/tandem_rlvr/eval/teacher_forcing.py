"""Teacher-forced scoring: one batched forward over prompt + response, no decoding.

``response_logprobs`` gives each response token's log-prob under a model;
``response_logits`` yields the (T, V) logits of the response positions, for statistics
over whole distributions (cross-entropy, overlap alpha). Rows are right-padded together
with an attention mask, in chunks of ``batch_size`` rows.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import torch


def _batches(prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], pad_id: int, batch_size: int):
    for start in range(0, len(prompt_ids), batch_size):
        rows = [list(p) + list(c) for p, c in zip(prompt_ids[start:start + batch_size], completion_ids[start:start + batch_size])]
        L = max(len(r) for r in rows)
        ids = torch.full((len(rows), L), pad_id, dtype=torch.long)
        attn = torch.zeros((len(rows), L), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
            attn[i, : len(r)] = 1
        yield start, ids, attn


@torch.no_grad()
def response_logits(model, prompt_ids, completion_ids, pad_id: int, batch_size: int = 32) -> Iterator[tuple[int, torch.Tensor]]:
    """Yield (row index, logits (T_row, V) float32 predicting each response token)."""
    dev = next(model.parameters()).device
    for start, ids, attn in _batches(prompt_ids, completion_ids, pad_id, batch_size):
        logits = model(input_ids=ids.to(dev), attention_mask=attn.to(dev)).logits  # (B, L, V)
        for i in range(ids.shape[0]):
            P, T = len(prompt_ids[start + i]), len(completion_ids[start + i])
            yield start + i, logits[i, P - 1: P - 1 + T].float()  # position t predicts token t+1


@torch.no_grad()
def response_logprobs(model, prompt_ids, completion_ids, pad_id: int, temperature: float = 1.0,
                      batch_size: int = 32) -> list[torch.Tensor]:
    """Per row, (T_row,) log-probs (CPU float32) of the response tokens under ``model``."""
    out: list[torch.Tensor] = [torch.empty(0)] * len(prompt_ids)
    for i, logits in response_logits(model, prompt_ids, completion_ids, pad_id, batch_size):
        lp = torch.log_softmax(logits / (temperature if temperature > 0 else 1.0), dim=-1)
        tok = torch.tensor(completion_ids[i], dtype=torch.long, device=lp.device)
        out[i] = lp.gather(-1, tok[:, None]).squeeze(-1).cpu()
    return out
