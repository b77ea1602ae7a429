"""Training: Tandem RLVR, vanilla GRPO and KL-Reg on TRL's GRPOTrainer (``tandem train``).

The three methods differ only in who writes the rollouts (and KL-Reg's KL term): ``train``
runs a run from a ``TrainConfig``, by job: ``prepare`` (its data), ``run_identity`` (config.json,
the resume check, the model card), ``trl_args`` (TRL's GRPOConfig), ``assemble`` (engine, rewards,
callbacks, trainer) and ``run_start`` (its hold on the run directory, the one cleanup);
``rollout`` is the ``rollout_func`` the run's rollout engine (``engines``) fills (rollouts with
their senior mask); ``weights`` streams the
trained senior to that engine once per update; ``trainer`` is the GRPOTrainer subclass
(fail-closed mask, the junior as KL reference, junior imitation) and holds all of TRL's
private surface we touch; ``losses`` has the loss pieces as pure functions; ``callbacks``
the run log and validation; ``precision`` master weights and the hf engine's rollout copy.
"""
