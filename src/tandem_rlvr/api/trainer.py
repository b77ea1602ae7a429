"""``TandemGRPOTrainer``: TRL's ``GRPOTrainer`` as a TRL user constructs it, training Tandem RLVR (or GRPO,
KL-Reg) the way ``tandem train`` does.

    trainer = TandemGRPOTrainer(model="tiny", junior="tiny-junior", reward_funcs=[my_reward],
                                args=TandemGRPOConfig(output_dir="runs/mine", use_cpu=True, bf16=False),
                                train_dataset=ds, eval_dataset=val_ds)
    trainer.train()

It takes what ``GRPOTrainer`` takes: models by id or path (loaded as ``tandem train`` loads them: dtypes,
devices, junior pools, ZeRO-3 partitions) or as objects; a ``datasets.Dataset`` with a ``prompt`` column
(plain or conversational) whose other columns reach the reward functions; reward callables in TRL's
convention; a PEFT ``LoraConfig``; callbacks. Its settings become the run's ``TrainConfig``
(``api.config.train_keys``), so the run is ``tandem train``'s: the same rollouts, loss, ``log.jsonl``,
validation on ``eval_dataset`` with ``best/``, checkpoints, resume by running the same script again, a
finished run a no-op, and config.json with the dataset's fingerprint and the reward functions' names (a
resume on other rows or rewards is refused).

Refused, one line each: TRL's ``tools`` and ``environment_factory`` (TRL replaces the rollout's ``env_mask``
with its tool mask when either is set, which would train on junior tokens), and a ``rollout_func`` (the
tandem rollout is the trainer's own; ``api.rollout.tandem_rollout`` serves a plain GRPOTrainer).
"""

from __future__ import annotations

from ..errors import TandemError
from ..rl.trainer import TandemGRPOTrainer as _Trainer

REFUSED = {
    "tools": "TRL replaces the rollout's senior mask (env_mask) with its tool mask when tools are set, so junior "
             "tokens would train; tandem multi-turn does not exist yet",
    "environment_factory": "TRL replaces the rollout's senior mask (env_mask) with its tool mask for environments, "
                           "so junior tokens would train; tandem multi-turn does not exist yet",
    "rollout_func": "the tandem rollout is this trainer's own (for your own GRPOTrainer use tandem_rollout)",
    "optimizers": "the optimiser is TRL's AdamW from the config (learning_rate, weight_decay, lr_scheduler_type)",
}


def refuse_unsupported(kwargs: dict) -> None:
    """A one-line TandemError for the first GRPOTrainer argument tandem cannot compose (``REFUSED``)."""
    for name, value in kwargs.items():
        if name in REFUSED and value not in (None, [], ()):
            raise TandemError(f"TandemGRPOTrainer: {name} is not supported: {REFUSED[name]}")
        if name not in REFUSED:
            raise TandemError(f"TandemGRPOTrainer: unexpected argument {name!r}")


class TandemGRPOTrainer(_Trainer):
    """See the module docstring. ``junior``: the frozen junior (id, path, ``A,B`` pool spec or a model object;
    default: the senior's own initial weights, as ``tandem train``). Validation runs on ``eval_dataset``
    every ``args.eval_every`` updates (none given: no validation, best/ is not written)."""

    def __init__(self, model, junior=None, reward_funcs=None, args=None, train_dataset=None, eval_dataset=None,
                 processing_class=None, peft_config=None, callbacks=None, **kwargs):
        from ..planner.memory import check_fits_machine
        from ..rl.assemble import build_run
        from ..rl.sharding import from_launcher
        from .settings import run_settings

        refuse_unsupported(kwargs)
        self._in_run = False
        cfg, given, self._extra = run_settings(
            model, junior, reward_funcs, args, train_dataset, eval_dataset, processing_class, peft_config)
        self._cfg = from_launcher(cfg)  # an accelerate FSDP or DeepSpeed launch's layout, as tandem train reads it
        self._user_args = args
        check_fits_machine(self._cfg)  # a batch bigger than the machine is one line, before any weights move
        self._run = build_run(self._cfg, print, given, make_trainer=self._become_trainer, stored=self._extra)
        for cb in callbacks or []:
            self.add_callback(cb)

    def _become_trainer(self, **kwargs):
        """Initialise this object as the run's trainer (``rl.assemble`` passes the arguments); the fields that
        are no part of a run's identity (run name, logging dir, tracker project) come from the user's config."""
        from ..rl.grpo_config import NOT_RECORDED

        built = kwargs["args"]
        for name in NOT_RECORDED - {"output_dir"}:
            if hasattr(self._user_args, name):
                setattr(built, name, getattr(self._user_args, name))
        _Trainer.__init__(self, **kwargs)
        return self

    @property
    def run(self):
        """The assembled run (``rl.assemble.Run``): its prepared data, rollout, validation and run log."""
        return self._run

    @property
    def config(self):
        """The run's settings as ``tandem train`` reads them (``config.TrainConfig``); config.json records them."""
        return self._cfg

    def train(self, resume_from_checkpoint=None, **kwargs):
        """Train from the run directory's last checkpoint (a fresh directory: from the start), then write
        final/ and summary.json (returned). A finished run is not trained again."""
        from ..rl.train import run_training

        if self._in_run:  # run_training's call: the Trainer's loop
            return _Trainer.train(self, resume_from_checkpoint=resume_from_checkpoint, **kwargs)
        if resume_from_checkpoint not in (None, True) or kwargs:
            raise TandemError("TandemGRPOTrainer.train resumes from its output_dir's last checkpoint by itself; "
                              "give no checkpoint path or trial")
        self._in_run = True
        try:
            return run_training(self._run, self._cfg, print, self._extra)
        finally:
            self._in_run = False
