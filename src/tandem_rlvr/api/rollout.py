"""``tandem_rollout``: a ``rollout_func`` that makes a user's own TRL ``GRPOTrainer`` a Tandem RLVR one.

    trainer = GRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(...), train_dataset=...,
                          rollout_func=tandem_rollout("tiny-junior"))

Every rollout is co-written by the trainer's policy (the senior) and the frozen ``junior`` under the handoff
``schedule``; it returns TRL's rollout keys with the senior mask as ``env_mask``, which TRL multiplies into
its loss mask, so the loss touches only senior-written tokens. The mask is fail-closed: a completion without
its mask, or with one of another length, is an error, and a trainer with ``tools`` or environments (whose
tool mask would replace ``env_mask``) is refused at the first call.

Sampling follows the trainer's config (``temperature``, ``top_p``, ``top_k``, ``max_completion_length``,
``num_generations``, ``seed``); authorship coins and samples derive from (seed, step, prompt, copy), as in
``tandem train``. Differences from ``TandemGRPOTrainer`` (which is the paper's set-up): TRL's token-mean
divides by senior tokens only (the paper's patch divides by every response token: ``loss_normalizer``), and
KL-Reg, junior-token weights, junior imitation and tandem validation are the trainer's, not the rollout's.
"""

from __future__ import annotations

from ..errors import TandemError


class TandemRolloutFunc:
    """The callable ``tandem_rollout`` returns (see the module docstring); built on its first call, when the
    trainer (its policy, tokenizer and sampling settings) is known."""

    def __init__(self, junior, schedule: str, p: float, K: int, engine: str, junior_device: str | None,
                 max_prompt_tokens: int, plugins: tuple[str, ...]):
        from ..config import TrainConfig

        self.junior, self.junior_device = junior, junior_device
        self.keys = {"method": "tandem", "schedule": schedule, "p": p, "K": K, "engine": engine,
                     "max_prompt_tokens": max_prompt_tokens, "plugins": list(plugins)}
        TrainConfig.from_keys(**self.keys)  # a bad schedule, p or K fails here, before any trainer exists
        self.rollout = None

    def _build(self, trainer):
        from ..config import TrainConfig
        from ..models import Pair, load_model
        from ..rl.assemble import open_rollout_engine
        from ..rl.rollout import TandemRollout

        if getattr(trainer, "tools", None) or getattr(trainer, "environment_factories", None):
            raise TandemError("tandem_rollout: the trainer has tools or an environment_factory; TRL then replaces the "
                              "senior mask (env_mask) with its tool mask and would train on junior tokens")
        a = trainer.args
        senior = trainer.accelerator.unwrap_model(trainer.model)
        junior = self.junior
        device = next(senior.parameters()).device
        spec = getattr(senior, "name_or_path", None) or "senior"
        if isinstance(junior, str):
            junior_spec = junior
            junior = load_model(junior, self.junior_device or device, next(senior.parameters()).dtype)
        else:
            junior_spec = getattr(junior, "name_or_path", None) or "junior"
            junior.requires_grad_(False).eval()
        cfg = TrainConfig.from_keys(
            **self.keys, senior=spec, junior=junior_spec, group_size=a.num_generations, temperature=a.temperature,
            top_p=a.top_p, top_k=a.top_k or 0, max_new_tokens=a.max_completion_length, seed=a.seed,
            senior_device=str(device), prompts_per_step=1, prompts_per_minibatch=1, eval_every=0, kl_every=0)
        tok = trainer.processing_class
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        pair = Pair(senior, junior, tok)
        self.rollout = TandemRollout(cfg, pair, open_rollout_engine(cfg, pair, trainer.accelerator.num_processes))

    def __call__(self, prompts: list, trainer) -> dict:
        if self.rollout is None:
            self._build(trainer)
        return self.rollout(prompts, trainer)


def tandem_rollout(junior, *, schedule: str = "word", p: float = 0.5, K: int = 32, engine: str = "hf",
                   junior_device: str | None = None, max_prompt_tokens: int = 1024,
                   plugins: tuple[str, ...] = ()) -> TandemRolloutFunc:
    """A TRL ``rollout_func`` co-writing every rollout with the frozen ``junior`` (an id, a path, a built-in
    name or a model object of the policy's tokenizer). ``schedule``, ``p``, ``K``: the handoff schedule
    (``tandem schedules`` lists them; paper: word, 0.5, 32); ``engine``: hf (in-process; the vLLM engines
    need ``tandem train`` or ``TandemGRPOTrainer``); ``plugins``: modules registering your own schedules."""
    from ..engines.base import engine_kind

    if not engine_kind(engine).transformers:  # the policy is decoded as it is, in this process
        raise TandemError(f"tandem_rollout: engine {engine!r} is not served to a plain GRPOTrainer (its weight "
                          "pushes are TandemGRPOTrainer's); use engine hf or TandemGRPOTrainer")
    return TandemRolloutFunc(junior, schedule, p, K, engine, junior_device, max_prompt_tokens, tuple(plugins))
