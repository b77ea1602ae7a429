"""``TandemForCausalLM``: a vLLM model that holds vLLM's own senior and junior models.

How it plugs in (no fork): the engine loads the *senior's* checkpoint with
``hf_overrides={"architectures": ["TandemForCausalLM"], "tandem_junior": DIR,
"tandem_senior_architectures": [...]}``. vLLM then builds this class, which builds the
senior's own vLLM class under the prefix ``senior.`` and the junior's under ``junior.``
(with the junior's own ``hf_config``). Both are ordinary vLLM modules, so both attention
stacks get paged KV cache, prefix caching and continuous batching from vLLM itself.

- ``forward`` runs both bodies on the same tokens and returns their hidden states side by
  side, (N, Hs + Hj).
- ``compute_logits`` returns both output layers side by side, (N, Vs + Vj). The logits
  processor (``vllm_logits``) keeps each request's active half, so the sampler, EOS,
  detokenising and stop strings see an ordinary (N, Vs) row.
- Weights: vLLM's default loader reads the senior's files (primary source, no prefix) and
  then the junior's (``secondary_weights``, prefix ``junior.``); ``load_weights`` routes each
  stream to its own model's loader.

Cost: every token runs two bodies and two output layers (the transformers decoder runs only
the active output layer per row); see docs/architecture.md.

A junior pool (``hf_overrides["tandem_juniors"]``: every junior's directory, in pool order; the first is
also ``tandem_junior``): the model holds one vLLM junior per directory, the first under ``junior.`` as
above and junior i > 0 under ``junior_<i>.`` (its own attention layers and KV cache). ``forward`` runs the
senior and every junior on every token, and ``compute_logits`` returns (N, Vs + Vj0 + Vj1 + ...); the
request's ``junior`` argument tells the logits processor which junior half its junior turns read
(docs/pool.md, "vLLM engines"). Each junior is a secondary weight source with its own prefix.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.model_executor.model_loader.default_loader import DefaultModelLoader
from vllm.model_executor.models.registry import ModelRegistry


def junior_module(i: int) -> str:
    """The attribute (and weight prefix, without the dot) of junior ``i`` of the pool."""
    return "junior" if i == 0 else f"junior_{i}"


def junior_paths(cfg) -> list[str]:
    """Every junior directory the tandem model's config names (a pool's, or the one junior)."""
    pool = getattr(cfg, "tandem_juniors", None)
    one = getattr(cfg, "tandem_junior", None)
    return list(pool) if pool else ([one] if one else [])


def _junior_config(vllm_config: VllmConfig, junior_path: str) -> VllmConfig:
    """A shallow copy of ``vllm_config`` whose model config describes the junior."""
    from transformers import AutoConfig

    hf = AutoConfig.from_pretrained(junior_path)
    mc = copy.copy(vllm_config.model_config)
    mc.hf_config = hf
    mc.hf_text_config = hf.get_text_config()
    jc = copy.copy(vllm_config)
    object.__setattr__(jc, "model_config", mc)
    return jc


def _model_class(architectures, model_config):
    cls, _ = ModelRegistry.resolve_model_cls(list(architectures), model_config)
    return cls


class TandemForCausalLM(nn.Module):
    """Senior and junior side by side; see the module docstring."""

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        cfg = vllm_config.model_config.hf_config
        paths = junior_paths(cfg)
        senior_archs = getattr(cfg, "tandem_senior_architectures", None)
        if not paths or not senior_archs:
            raise ValueError("TandemForCausalLM needs hf_overrides tandem_junior and tandem_senior_architectures")
        s_cls = _model_class(senior_archs, vllm_config.model_config)
        self.senior = s_cls(vllm_config=vllm_config, prefix=f"{prefix}senior" if not prefix else f"{prefix}.senior")
        self.junior_names = [junior_module(i) for i in range(len(paths))]
        hidden = [cfg.hidden_size]
        self.secondary_weights = []
        for name, path in zip(self.junior_names, paths, strict=True):
            jcfg = _junior_config(vllm_config, path)
            j_cls = _model_class(jcfg.model_config.hf_config.architectures, jcfg.model_config)
            setattr(self, name, j_cls(vllm_config=jcfg, prefix=f"{prefix}{name}" if not prefix else f"{prefix}.{name}"))
            hidden.append(jcfg.model_config.hf_config.hidden_size)
            self.secondary_weights.append(DefaultModelLoader.Source(path, revision=None, prefix=f"{name}."))
        self.hidden = tuple(hidden)

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.senior.embed_input_ids(input_ids)

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None, **kwargs) -> torch.Tensor:
        """(N,) tokens -> (N, Hs + Hj0 + ...) hidden states of every body."""
        hs = self.senior(input_ids, positions)
        hj = [getattr(self, n)(input_ids, positions).to(hs.dtype) for n in self.junior_names]
        return torch.cat([hs] + hj, dim=-1)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """(N, Hs + Hj0 + ...) -> (N, Vs + Vj0 + ...): senior logits, then each junior's, in pool order."""
        hs, *hj = hidden_states.split(self.hidden, dim=-1)
        ls = self.senior.compute_logits(hs)
        return torch.cat([ls] + [getattr(self, n).compute_logits(h.contiguous()).to(ls.dtype)
                                 for n, h in zip(self.junior_names, hj, strict=True)], dim=-1)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """The senior's weights (no prefix) come first, then each junior's (``junior.``, ``junior_1.``, ...), in
        order; each run of names goes to its own model's loader (a training update carries the senior's only)."""
        it = iter(weights)
        prefixes = {f"{n}.": n for n in self.junior_names}
        pending: list = []  # the first (owner, name, tensor) of the next owner's run, once read

        def owner(name: str) -> tuple[str, str]:
            head = name.split(".", 1)[0] + "."
            return (prefixes[head], name[len(head):]) if head in prefixes else ("senior", name)

        def run(who: str):
            while True:
                if pending:
                    if pending[0][0] != who:
                        return
                    _, n, w = pending.pop()
                else:
                    try:
                        n, w = next(it)
                    except StopIteration:
                        return
                    o, n = owner(n)
                    if o != who:
                        pending.append((o, n, w))
                        return
                yield n, w

        loaded: set[str] = set()
        done: set[str] = set()
        who = "senior"
        while True:
            if who in done:
                raise ValueError(f"TandemForCausalLM: the weights of {who} arrived in two separate runs")
            loaded |= {f"{who}.{n}" for n in getattr(self, who).load_weights(run(who))}
            done.add(who)
            if not pending:
                try:  # peek: more weights after this run?
                    n, w = next(it)
                except StopIteration:
                    return loaded
                o, n = owner(n)
                pending.append((o, n, w))
            who = pending[0][0]
