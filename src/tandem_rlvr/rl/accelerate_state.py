"""accelerate's private state, touched here and nowhere else.

On a CPU machine accelerate turns an FSDP or DeepSpeed launch into plain multi-CPU DDP without a
word, although FSDP2 and ZeRO-3 both run on CPU with gloo. ``force_on_cpu`` initialises accelerate's
shared state itself and switches it to the backend's distributed type; the Trainer's Accelerator then
finds the state initialised and keeps it. That takes private names (a class-level shared dict, a
constructor keyword, a plugin method keyword), listed in ``PRIVATE_SURFACE``;
``tests/unit/rl/test_accelerate_surface.py`` fails naming the missing piece when an accelerate release moves one.
"""

from __future__ import annotations

PRIVATE_SURFACE = {
    "class_attributes": ("accelerate.state.PartialState._shared_state",),
    "keywords": ("accelerate.state.AcceleratorState.__init__:_from_accelerator",
                 "accelerate.utils.DeepSpeedPlugin.select:_from_accelerator_state"),
    # written on the AcceleratorState instance
    "instance_attributes": ("distributed_type", "fsdp_plugin", "deepspeed_plugins"),
}


def force_on_cpu(kind: str, mixed_precision: str, fsdp_plugin=None, deepspeed_plugin=None):
    """Initialise accelerate's shared state on a CPU machine as ``kind`` (``"FSDP"`` or ``"DEEPSPEED"``,
    a ``DistributedType`` name) with the backend's plugin, where accelerate would leave it multi-CPU DDP.
    Returns the ``DistributedType`` (a str enum) the state ends with: ``kind``, or what a single-process
    run got (the caller refuses it)."""
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType, TorchDynamoPlugin

    want = DistributedType[kind]
    state = AcceleratorState(cpu=True, mixed_precision=mixed_precision, fsdp_plugin=fsdp_plugin,
                             dynamo_plugin=TorchDynamoPlugin(), _from_accelerator=True)
    if state.distributed_type == DistributedType.MULTI_CPU:
        if fsdp_plugin is not None:
            state.fsdp_plugin = fsdp_plugin
        if deepspeed_plugin is not None:
            deepspeed_plugin.select(_from_accelerator_state=True)
            state.deepspeed_plugins = deepspeed_plugin
        state.distributed_type = want
        PartialState._shared_state["distributed_type"] = want
    return state.distributed_type
