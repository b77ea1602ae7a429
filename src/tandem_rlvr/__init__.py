"""tandem-rlvr: Tandem RLVR (arXiv 2606.28166) training and evaluation.

A trainable senior and a frozen junior co-write every rollout; the verifier rewards the
team's final ``\\boxed{}`` answer; the GRPO loss touches only senior-written tokens.

The Python API, shaped like TRL's (README "From Python"; ``examples/``):

- ``TandemGRPOConfig``: TRL's ``GRPOConfig`` with the tandem settings (method, junior, schedule, p, K, ...).
- ``TandemGRPOTrainer``: TRL's ``GRPOTrainer`` taking a ``junior`` too; the run of ``tandem train``.
- ``tandem_rollout``: a ``rollout_func`` that makes your own ``GRPOTrainer`` a tandem one.
- ``evaluate``: solo or handoff pass@k from a notebook (the figures of ``tandem eval``).
- the plug-in points: ``register_task``, ``register_benchmark``, ``register_reward_term``,
  ``register_schedule``, ``register_measure``, ``register_method``, ``load_plugins``.

Names load on first use, so ``import tandem_rlvr`` (and the ``tandem`` command) does not import TRL.
See ``docs/architecture.md`` for the map of the package.
"""

from importlib import import_module

__version__ = "0.1.0"

# public name -> "module:attribute" (relative to this package)
_EXPORTS = {
    "TandemGRPOConfig": "rl.grpo_config:TandemGRPOConfig",
    "TandemGRPOTrainer": "api.trainer:TandemGRPOTrainer",
    "tandem_rollout": "api.rollout:tandem_rollout",
    "evaluate": "api.evaluate:evaluate",
    "register_task": "tasks:register_task",
    "register_benchmark": "data.benchmarks:register_benchmark",
    "register_reward_term": "rewards.terms:register_reward_term",
    "register_schedule": "decoding.schedule:register_schedule",
    "register_measure": "eval.measure.registry:register_measure",
    "register_method": "config.methods:register_method",
    "load_plugins": "plugins:load_plugins",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tandem_rlvr' has no attribute {name!r}")
    module, _, attr = _EXPORTS[name].partition(":")
    value = getattr(import_module(f".{module}", __name__), attr)
    globals()[name] = value  # once
    return value


def __dir__():
    return sorted(__all__)
