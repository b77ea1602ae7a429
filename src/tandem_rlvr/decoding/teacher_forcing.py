"""Teacher-forced scoring: batched forwards over prompt + response, no decoding.

Rows are sorted by length and packed into right-padded batches of at most ``batch_tokens``
tokens with an attention mask (right padding is inert under the causal mask). A model's
body runs once per batch and its output layer only at response positions, in chunks, so
(N, V) logits for a whole batch never materialise (151k-token vocabularies). This assumes
logits = output layer(final hidden state), true for the Qwen, Llama and Mistral families.
Used by the legibility battery (``score_sequences``: junior CE and overlap alpha) and by the
training monitor of KL(senior || junior).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from ..errors import TandemError
from ..progress import progress_bar


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
    for b, (i, s) in enumerate(zip(idx, seqs, strict=True)):
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
                        .gather(-1, targets[c:c + chunk, None].to(dev)).squeeze(-1)
                        for c in range(0, len(targets), chunk)])
        lp = lp.cpu()
        for i in idx:
            out[i] = lp[owner == i]
    return out


def token_ce_alpha(logits_sen: torch.Tensor, logits_jun: torch.Tensor,
                   targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Junior CE (N,) and overlap alpha (N,) at N positions.

    logits_sen (N, V_s), logits_jun (N, V_j): both models' logits predicting (N,) targets.
    If the two output layers differ in size (padded vocabularies), alpha sums over the
    shared ids; ids past the tokenizer carry no mass in practice.
    """
    V = min(logits_sen.shape[-1], logits_jun.shape[-1])
    logp_jun = torch.log_softmax(logits_jun.float(), dim=-1)  # (N, V_j)
    ce = -logp_jun.gather(-1, targets[:, None]).squeeze(-1)  # (N,)
    p_sen = torch.softmax(logits_sen.float(), dim=-1)[:, :V]
    alpha = torch.minimum(p_sen, logp_jun[:, :V].exp()).sum(-1)  # (N,)
    return ce, alpha


@torch.no_grad()
def score_sequences(senior, junior, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int,
                    batch_tokens: int = 16384, chunk: int = 4096, progress: bool = False) -> dict[str, np.ndarray]:
    """Teacher-forced legibility of S (prompt, response) pairs.

    Returns {"ce": (S,), "alpha": (S,), "tokens": (S,)}: per-sample means over response
    tokens (NaN for an empty response) and response lengths.
    """
    S = len(prompts)
    if any(len(p) == 0 for p in prompts):
        raise TandemError("teacher forcing needs a non-empty prompt for every sample")
    n_tok = torch.tensor([len(r) for r in responses], dtype=torch.float64)
    sums = torch.zeros(2, S, dtype=torch.float64)  # CE, alpha
    dev = next(senior.parameters()).device
    live = [i for i in range(S) if len(responses[i])]
    batches = pack_batches([len(prompts[i]) + len(responses[i]) for i in live], batch_tokens)
    head_s, head_j = senior.get_output_embeddings(), junior.get_output_embeddings()
    with progress_bar(progress) as bar:
        task = bar.add_task("legibility (teacher-forced)", total=len(live))
        for batch in batches:
            idx = [live[j] for j in batch]
            ids, attn, rows, cols, targets, owner = collate(prompts, responses, idx, pad_id)
            h_s = hidden_states(senior, ids, attn)[rows.to(dev), cols.to(dev)]  # (N, H_s)
            h_j = hidden_states(junior, ids, attn)
            h_j = h_j[rows.to(h_j.device), cols.to(h_j.device)]  # (N, H_j)
            for c in range(0, targets.numel(), chunk):
                ce, alpha = token_ce_alpha(head_s(h_s[c:c + chunk]), head_j(h_j[c:c + chunk]).to(dev),
                                           targets[c:c + chunk].to(dev))
                sums.index_add_(1, owner[c:c + chunk], torch.stack([ce, alpha]).double().cpu())
            bar.advance(task, len(idx))
    means = (sums / n_tok.clamp(min=1)).numpy()
    means[:, n_tok.numpy() == 0] = np.nan
    return {"ce": means[0], "alpha": means[1], "tokens": n_tok.numpy().astype(np.int64)}
