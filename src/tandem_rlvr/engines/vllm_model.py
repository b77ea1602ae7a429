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
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.model_executor.model_loader.default_loader import DefaultModelLoader
from vllm.model_executor.models.registry import ModelRegistry

JUNIOR_PREFIX = "junior."


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
        junior_path = getattr(cfg, "tandem_junior", None)
        senior_archs = getattr(cfg, "tandem_senior_architectures", None)
        if not junior_path or not senior_archs:
            raise ValueError("TandemForCausalLM needs hf_overrides tandem_junior and tandem_senior_architectures")
        jcfg = _junior_config(vllm_config, junior_path)
        s_cls = _model_class(senior_archs, vllm_config.model_config)
        j_cls = _model_class(jcfg.model_config.hf_config.architectures, jcfg.model_config)
        self.senior = s_cls(vllm_config=vllm_config, prefix=f"{prefix}senior" if not prefix else f"{prefix}.senior")
        self.junior = j_cls(vllm_config=jcfg, prefix=f"{prefix}junior" if not prefix else f"{prefix}.junior")
        self.hidden = (cfg.hidden_size, jcfg.model_config.hf_config.hidden_size)
        self.secondary_weights = [DefaultModelLoader.Source(junior_path, revision=None, prefix=JUNIOR_PREFIX)]

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.senior.embed_input_ids(input_ids)

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None, **kwargs) -> torch.Tensor:
        """(N,) tokens -> (N, Hs + Hj) hidden states of both bodies."""
        hs = self.senior(input_ids, positions)
        hj = self.junior(input_ids, positions)
        return torch.cat([hs, hj.to(hs.dtype)], dim=-1)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """(N, Hs + Hj) -> (N, Vs + Vj): senior logits, then junior logits."""
        hs, hj = hidden_states.split(self.hidden, dim=-1)
        ls = self.senior.compute_logits(hs)
        lj = self.junior.compute_logits(hj.contiguous())
        return torch.cat([ls, lj.to(ls.dtype)], dim=-1)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """The senior's weights (no prefix) come first, then the junior's (``junior.``)."""
        it = iter(weights)
        first_junior: list[tuple[str, torch.Tensor]] = []

        def senior_part():
            for name, w in it:
                if name.startswith(JUNIOR_PREFIX):
                    first_junior.append((name[len(JUNIOR_PREFIX):], w))
                    return
                yield name, w

        def junior_part():
            yield from first_junior
            for name, w in it:
                yield name[len(JUNIOR_PREFIX):] if name.startswith(JUNIOR_PREFIX) else name, w

        loaded = {f"senior.{n}" for n in self.senior.load_weights(senior_part())}
        loaded |= {f"junior.{n}" for n in self.junior.load_weights(junior_part())}
        return loaded
