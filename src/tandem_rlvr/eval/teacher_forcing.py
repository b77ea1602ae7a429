"""Teacher-forced scoring: batched forwards over prompt + response, no decoding.

Rows are sorted by length and packed into right-padded batches of at most ``batch_tokens``
tokens with an attention mask (right padding is inert under the causal mask). A model's
body runs once per batch and its output layer only at response positions, in chunks, so
(N, V) logits for a whole batch never materialise (151k-token vocabularies). This assumes
logits = output layer(final hidden state), true for the Qwen, Llama and Mistral families.
Used by the legibility battery and by the training monitor of KL(senior || junior).
"""

from __future__ import annotations

from typing import Sequence

import torch


def pack_batches(lengths: Sequence[int], batch_tokens: int) -> list[list[int]]:
    """Row indices grouped longest first so that rows x longest row <= batch_tokens per batch
    (a single row longer than the budget forms its own batch)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        if batches and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= batch_tokens:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def collate(prompts, responses, idx, pad_id):
    """Right-padded ids (B, L), mask (B, L) and, for the N response tokens of the batch, the
    predicting positions (rows (N,), cols (N,)), targets (N,) and owning sample (N,)."""
    seqs = [list(prompts[i]) + list(responses[i]) for i in idx]
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), L), dtype=torch.long)
    rows, cols, owner = [], [], []
    for b, (i, s) in enumerate(zip(idx, seqs)):
        ids[b, : len(s)] = torch.tensor(s)
        attn[b, : len(s)] = 1
        P, T = len(prompts[i]), len(responses[i])
        rows.append(torch.full((T,), b))
        cols.append(torch.arange(P - 1, P - 1 + T))  # position t predicts token t + 1
        owner.append(torch.full((T,), i))
    rows, cols, owner = torch.cat(rows), torch.cat(cols), torch.cat(owner)
    return ids, attn, rows, cols, ids[rows, cols + 1], owner


def hidden_states(model, ids, attn) -> torch.Tensor:
    dev = next(model.parameters()).device
    return model.get_decoder()(input_ids=ids.to(dev), attention_mask=attn.to(dev), use_cache=False).last_hidden_state



@torch.no_grad()
def response_logprobs(model, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], pad_id: int,
                      temperature: float = 1.0, batch_tokens: int = 16384, chunk: int = 4096) -> list[torch.Tensor]:
    """Per row, (T_row,) CPU float32 log-probs of the response tokens under ``model``'s
    temperature-scaled distribution."""
    out: list[torch.Tensor] = [torch.empty(0) for _ in prompt_ids]
    live = [i for i in range(len(prompt_ids)) if len(completion_ids[i])]
    head = model.get_output_embeddings()
    dev = next(model.parameters()).device
    scale = temperature if temperature > 0 else 1.0
    for batch in pack_batches([len(prompt_ids[i]) + len(completion_ids[i]) for i in live], batch_tokens):
        idx = [live[j] for j in batch]
        ids, attn, rows, cols, targets, owner = collate(prompt_ids, completion_ids, idx, pad_id)
        h = hidden_states(model, ids, attn)[rows.to(dev), cols.to(dev)]  # (N, H)
        lp = torch.cat([torch.log_softmax(head(h[c:c + chunk]).float() / scale, dim=-1)
                        .gather(-1, targets[c:c + chunk, None].to(dev)).squeeze(-1) for c in range(0, len(targets), chunk)])
        lp = lp.cpu()
        for i in idx:
            out[i] = lp[owner == i]
    return out
