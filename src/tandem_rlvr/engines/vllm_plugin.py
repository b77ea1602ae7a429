"""vLLM entry points (``pyproject.toml``): the ``vllm.general_plugins`` hook registers the
tandem model class in every vLLM process, spawned workers included; the logits processor is
exposed to the ``vllm.logits_processors`` group from ``vllm_logits``.

Registration is by name (``"module:Class"``), so loading the plugin imports nothing heavy
and never initialises a device.
"""

from __future__ import annotations

ARCH = "TandemForCausalLM"


def register() -> None:
    """Register ``TandemForCausalLM`` with vLLM's model registry (idempotent)."""
    from vllm import ModelRegistry

    if ARCH not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCH, "tandem_rlvr.engines.vllm_model:TandemForCausalLM")
