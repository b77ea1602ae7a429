"""vLLM entry points (``pyproject.toml``): the ``vllm.general_plugins`` hook imports the user's
plug-ins and registers the tandem model class (and our CPU weight-transfer backend) in every vLLM
process, spawned workers and ``tandem serve``'s server included; the logits processor is
exposed to the ``vllm.logits_processors`` group from ``vllm_logits``.

Registration is by name (``"module:Class"``), so loading the plugin imports nothing heavy
and never initialises a device.
"""

from __future__ import annotations

ARCH = "TandemForCausalLM"


def register() -> None:
    """Import the user's plug-ins (``tandem_rlvr.plugins``: entry points and ``$TANDEM_PLUGINS``, so the
    logits processor replays their schedules), then register ``TandemForCausalLM`` with vLLM's model
    registry and the ``tandem_gloo`` weight-transfer backend (``weight_sync``) with its factory
    (idempotent)."""
    from ..plugins import load_plugins

    load_plugins()
    from vllm import ModelRegistry

    if ARCH not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCH, "tandem_rlvr.engines.vllm_model:TandemForCausalLM")
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory, WeightTransferTrainerFactory

    for factory, cls in ((WeightTransferEngineFactory, "GlooWeightTransferEngine"),
                         (WeightTransferTrainerFactory, "GlooTrainerWeightTransferEngine")):
        try:
            factory.register_engine("tandem_gloo", "tandem_rlvr.engines.weight_sync", cls)
        except ValueError:  # already registered in this process
            pass
