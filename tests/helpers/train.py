"""Training-run builders shared by the tests of ``rl/``: the tiny run's config over the ``train_inputs``
fixture (tests/conftest.py), one generation batch through TRL's pipeline, a reward with a spread, and the
settings of a one-junior pool."""

from __future__ import annotations

from tandem_rlvr.config import load_train_config


def train_cfg(inputs, tmp_path, **kw):
    """A one-step tiny training config over ``inputs`` (the ``train_inputs`` fixture), written under ``tmp_path/run``;
    ``kw`` overrides any key."""
    root, senior, junior, data = inputs
    base = dict(senior=str(senior), junior=str(junior), dataset=str(data), dataset_split=None, val_size=4,
                template="plain", lr=1e-2, group_size=4, prompts_per_step=2, prompts_per_minibatch=2,
                max_prompt_tokens=64, max_new_tokens=12, temperature=1.0, max_steps=1, eval_every=0, save_every=1,
                kl_every=1, output_dir=str(tmp_path / "run"))
    base.update(kw)
    return load_train_config(None, None, base)


def first_batch(run):
    """One generation batch through TRL's own pipeline (prompt repetition, rewards, advantages), and the
    prompts the rollout saw."""
    trainer = run.trainer
    seen = []
    inner = trainer.rollout_func

    def spy(prompts, tr):
        seen.append(list(prompts))
        return inner(prompts, tr)

    trainer.rollout_func = spy
    dl = trainer.get_train_dataloader()
    inputs = next(iter(dl))
    trainer.model.train()
    batch = trainer._prepare_inputs(inputs)
    return batch, seen[0]


def spread_reward(completions, completion_ids, **_):
    """A non-binary reward of the token ids, so every group has a spread and advantages are non-zero."""
    return [(sum(c) % 5) / 4 + 0.5 * (len(c) % 2) for c in completion_ids]


spread_reward.__name__ = "accuracy_reward"


def one_junior_pool(root, tmp_path, pool: str) -> dict:
    """The settings of a pool that must train as the plain ``--junior root/junior`` (``root`` holds ``junior`` and
    its byte copy ``junior_copy``): ``yaml-one``, a pool file of that one junior; ``two-copies``, the junior and
    its byte copy, drawn per rollout."""
    if pool == "yaml-one":
        f = tmp_path / "pool.yaml"
        f.write_text(f"- {{name: {root / 'junior'}, weight: 1}}\n")
        return {"junior": str(f)}
    return {"junior": f"{root / 'junior'},{root / 'junior_copy'}", "junior_draw": "rollout"}
