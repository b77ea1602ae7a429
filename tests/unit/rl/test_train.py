"""Training on TRL's GRPOTrainer: the senior mask reaches the loss, junior tokens are inert,
the junior stays frozen, the mask is fail-closed, configs validate, runs resume."""

import json

import pytest
import torch

from tandem_rlvr.config import load_train_config
from tandem_rlvr.config.methods import method_kind
from tandem_rlvr.errors import TandemError
from tandem_rlvr.rl.rollout import check_senior_mask
from tandem_rlvr.rl.assemble import build_run
from tandem_rlvr.rl.train import train

from conftest import make_model
from helpers.train import first_batch, train_cfg


def test_trl_repeats_each_prompt_group_size_times_and_the_senior_mask_reaches_the_loss(train_inputs, tmp_path):
    run = build_run(train_cfg(train_inputs, tmp_path), print_fn=lambda *_: None)
    batch, prompts = first_batch(run)
    # TRL's sampler hands the rollout G consecutive copies of each prompt
    assert len(prompts) == 2 * 4 and all(prompts[i] == prompts[i - i % 4] for i in range(8))
    mask = batch["tool_mask"]
    assert mask.shape == batch["completion_ids"].shape
    real = batch["completion_mask"].bool()
    assert 0 < mask[real].float().mean() < 1  # a real mixture of senior and junior tokens
    # the loss reads it: the same batch with every token marked senior gives another loss
    batch["advantages"] = torch.tensor([1.0, -1.0, 0.5, -2.0] * 2)
    run.trainer.current_gradient_accumulation_steps = 1
    with torch.no_grad():
        gated = run.trainer._compute_loss(run.trainer.model, batch)
        ungated = run.trainer._compute_loss(run.trainer.model, {**batch, "tool_mask": torch.ones_like(mask)})
    assert not torch.isclose(gated, ungated)


def _loss_and_grad(trainer, batch):
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.training_step in a real step
    trainer.model.zero_grad()
    loss = trainer._compute_loss(trainer.model, batch)
    loss.backward()
    grads = [p.grad.detach().clone() for p in trainer.model.parameters() if p.grad is not None]
    return loss.detach(), grads


def test_junior_positions_change_neither_loss_nor_gradient(train_inputs, tmp_path):
    run = build_run(train_cfg(train_inputs, tmp_path), print_fn=lambda *_: None)
    trainer = run.trainer
    batch, _ = first_batch(run)
    jun = (batch["completion_mask"] * (1 - batch["tool_mask"])).bool()  # (B, T) junior-written tokens
    assert jun.any()
    batch["old_per_token_logps"] = torch.zeros_like(batch["completion_ids"], dtype=torch.float32)
    loss_a, grads_a = _loss_and_grad(trainer, batch)

    # 1) different old log-probs at junior positions
    changed = dict(batch)
    changed["old_per_token_logps"] = batch["old_per_token_logps"].masked_fill(jun, -7.0)
    # 2) different current log-probs at junior positions (the senior's own forward, perturbed there)
    orig = trainer._get_per_token_logps_and_entropies

    def perturbed(*a, **k):
        lp, ent, aux = orig(*a, **k)
        return lp + 3.0 * jun * lp, ent, aux  # changes value and gradient at junior positions only

    trainer._get_per_token_logps_and_entropies = perturbed
    # 3) different tokens at junior positions after the row's last senior token (context of no senior token)
    ids = changed["completion_ids"].clone()
    for b in range(ids.shape[0]):
        senior_pos = torch.nonzero(batch["tool_mask"][b] * batch["completion_mask"][b]).flatten()
        last = int(senior_pos.max()) if senior_pos.numel() else -1
        tail = jun[b].clone()
        tail[: last + 1] = False
        ids[b][tail] = (ids[b][tail] + 1) % 50
    changed["completion_ids"] = ids
    loss_b, grads_b = _loss_and_grad(trainer, changed)
    trainer._get_per_token_logps_and_entropies = orig
    torch.testing.assert_close(loss_a, loss_b)
    for ga, gb in zip(grads_a, grads_b, strict=True):
        torch.testing.assert_close(ga, gb)


def test_after_a_step_senior_changed_and_junior_bit_identical(train_inputs, tmp_path):
    run = build_run(train_cfg(train_inputs, tmp_path), print_fn=lambda *_: None)
    senior, junior = run.prep.pair.senior, run.prep.pair.junior
    s0 = {k: v.clone() for k, v in senior.state_dict().items()}
    j0 = {k: v.clone() for k, v in junior.state_dict().items()}
    # random models never box the right answer: give the step a reward signal that varies in the group

    def parity_reward(completions, **kw):
        return [float(len(c) % 2) for c in completions]

    parity_reward.__name__ = "accuracy_reward"
    run.trainer.reward_funcs[0] = parity_reward
    run.trainer.train()
    assert any(not torch.equal(s0[k], v) for k, v in senior.state_dict().items())
    assert all(torch.equal(j0[k], v) for k, v in junior.state_dict().items())
    assert all(not p.requires_grad for p in junior.parameters())


def test_klreg_reference_is_the_junior(train_inputs, tmp_path):
    run = build_run(train_cfg(train_inputs, tmp_path, method="klreg"), print_fn=lambda *_: None)
    assert run.trainer.beta_kl == 1e-3 and run.trainer.reference is run.prep.pair.junior
    assert run.trainer.beta == 0.0 and run.trainer.ref_model is None  # TRL loads no reference, adds no KL of its own
    batch, _ = first_batch(run)
    assert "ref_per_token_logps" in batch


def test_grpo_rollouts_are_senior_only(train_inputs, tmp_path):
    run = build_run(train_cfg(train_inputs, tmp_path, method="grpo"), print_fn=lambda *_: None)
    batch, _ = first_batch(run)
    real = batch["completion_mask"].bool()
    assert bool(batch["tool_mask"][real].all())


def test_mask_is_fail_closed(train_inputs, tmp_path):
    with pytest.raises(TandemError, match="no senior mask"):
        check_senior_mask([[1, 2]], None)
    with pytest.raises(TandemError, match="length 1"):
        check_senior_mask([[1, 2]], [[1]])
    run = build_run(train_cfg(train_inputs, tmp_path), print_fn=lambda *_: None)
    batch, _ = first_batch(run)
    run.trainer.current_gradient_accumulation_steps = 1
    short = {**batch, "tool_mask": batch["tool_mask"][:, :-1]}  # one position short of the completions
    with pytest.raises(TandemError, match="senior mask shape .* differs from completions"):
        run.trainer._compute_loss(run.trainer.model, short)
    del batch["tool_mask"]
    with pytest.raises(TandemError, match="no senior mask"):
        run.trainer._compute_loss(run.trainer.model, batch)


def test_bad_config_is_refused_before_writing(train_inputs, tmp_path):
    with pytest.raises(TandemError, match="did you mean 'lr'"):
        load_train_config(None, None, {"lrr": 1})
    with pytest.raises(TandemError, match="group_size"):
        train_cfg(train_inputs, tmp_path, group_size=1)
    with pytest.raises(TandemError, match="lr must be"):
        train_cfg(train_inputs, tmp_path, lr=0.0)
    with pytest.raises(TandemError, match="unknown method"):
        train_cfg(train_inputs, tmp_path, method="ppo")
    bad = tmp_path / "noanswer.jsonl"
    bad.write_text(json.dumps({"problem": "x"}) + "\n")
    with pytest.raises(TandemError):
        build_run(train_cfg(train_inputs, tmp_path, dataset=str(bad)))
    other_tok = tmp_path / "other"
    from conftest import make_tokenizer
    t2 = make_tokenizer(280)
    make_model(len(t2), 3, hidden=32, layers=1).save_pretrained(other_tok)
    t2.save_pretrained(other_tok)
    # a junior of another tokenizer trains at text level (decoding/xtandem.py), but not as KL-Reg's reference
    with pytest.raises(TandemError, match="KL-Reg scores the senior's ids under the junior"):
        build_run(train_cfg(train_inputs, tmp_path, junior=str(other_tok), method="klreg"))
    assert not (tmp_path / "run").exists()


def test_gpu_preset_loads_and_validates():
    cfg = load_train_config("qwen3-4b-deepscaler")
    assert cfg.models.senior == cfg.models.junior == "Qwen/Qwen3-4B-Instruct-2507"
    assert (cfg.models.senior_device, cfg.models.junior_device) == ("cuda:0", "cuda:1")
    assert (cfg.loss.lr, cfg.loss.clip, cfg.rollout.temperature, cfg.rollout.max_new_tokens,
            cfg.data.max_prompt_tokens) == (1e-6, 0.2, 0.6, 3000, 1024)
    # 16 prompts x 8 rollouts per rollout batch, mini-batches of 8 prompts: two updates per batch
    assert cfg.loop.prompts_per_step * cfg.rollout.group_size == 128 and cfg.loop.updates_per_batch == 2
    from tandem_rlvr.rl.trl_args import grpo_args
    args = grpo_args(cfg, num_processes=1, on_cpu=True)
    # 64 rows per update in micro-batches of 1 row: 64 accumulated micro-steps, 128 per rollout batch
    assert args.per_device_train_batch_size == 1 and args.gradient_accumulation_steps == 64
    assert args.steps_per_generation == 128 and args.loss_type == "dapo"
    assert args.generation_batch_size == 128 and args.num_generations == 8


def test_rerun_resumes_from_checkpoint_without_gaps(train_inputs, tmp_path):
    cfg = train_cfg(train_inputs, tmp_path, max_steps=2, save_every=1, eval_every=1)
    train(cfg, print_fn=lambda *_: None)
    cfg4 = train_cfg(train_inputs, tmp_path, max_steps=3, save_every=1, eval_every=1)
    with pytest.raises(TandemError, match="different max_steps"):
        train(cfg4, print_fn=lambda *_: None)
    # simulate a kill after step 1: drop the checkpoint of step 2 and its log lines survive filtering
    import shutil
    shutil.rmtree(tmp_path / "run" / "checkpoint-2")
    summary = train(cfg, print_fn=lambda *_: None)
    assert summary["steps"] == 2
    rows = [json.loads(x) for x in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    train_steps = [r["step"] for r in rows if "reward/mean" in r]
    assert train_steps == [1, 2]
    totals = [r["wall/total_s"] for r in rows]
    assert totals == sorted(totals)


def test_junior_imitation_term_adds_coef_times_junior_token_nll(train_inputs, tmp_path):
    run = build_run(train_cfg(train_inputs, tmp_path, junior_imitation=0.5), print_fn=lambda *_: None)
    trainer = run.trainer
    batch, _ = first_batch(run)
    trainer.current_gradient_accumulation_steps = 1
    with torch.no_grad():
        trainer.junior_imitation = 0.0
        base = trainer._compute_loss(trainer.model, batch)
        trainer.junior_imitation = 0.5
        with_term = trainer._compute_loss(trainer.model, batch)
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        logps = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attn, batch["completion_ids"].size(1))[0]
    jmask = batch["completion_mask"] * (1 - batch["tool_mask"])
    nll = -(logps * jmask).sum() / jmask.sum()
    torch.testing.assert_close(with_term - base, 0.5 * nll)
    assert trainer._metrics["train"]["junior_imitation/nll"]


def test_rollout_seeds_derive_from_seed_step_prompt_and_copy():
    from tandem_rlvr.rl.rollout import occurrence_seeds

    prompts = ["a", "a", "b", "a", "b"]
    s = occurrence_seeds(prompts, 0, 7)
    assert len(set(s)) == 5  # every copy of a prompt gets its own seed
    assert s == occurrence_seeds(prompts, 0, 7)  # a resumed step redraws the same rollouts
    assert occurrence_seeds(["b", "a"], 0, 7) == [s[2], s[0]]  # independent of batch order
    assert occurrence_seeds(prompts, 0, 8) != s and occurrence_seeds(prompts, 1, 7) != s


# --------------------------------------------------------------------------- loss aggregation (issue 10)
RATIOS = (0.5, 1.0, 1.1, 1.5)  # importance ratios cycled over positions: below, inside and above [0.8, 1.2]


def _fixed_ratio_loss(trainer, batch):
    """The trainer's loss with old log-probs 0 and current log-probs log(RATIOS[t % 4]), so the
    per-token ratio r is known without a model; returns (loss, r) with r (B, T)."""
    B, T = batch["completion_ids"].shape
    r = torch.tensor([RATIOS[t % len(RATIOS)] for t in range(T)]).expand(B, T)
    orig = trainer._get_per_token_logps_and_entropies

    def fixed(*a, **k):
        lp, ent, aux = orig(*a, **k)
        return r.log().to(lp.dtype) + 0 * lp, ent, aux

    trainer._get_per_token_logps_and_entropies = fixed
    trainer.current_gradient_accumulation_steps = 1
    try:
        with torch.no_grad():
            loss = trainer._compute_loss(trainer.model, {**batch, "old_per_token_logps": torch.zeros(B, T)})
    finally:
        trainer._get_per_token_logps_and_entropies = orig
    return loss, r


def _by_hand(batch, r, weight, denominator):
    """Clipped surrogate by hand, eps = 0.2: per token -min(r A, clip(r, 0.8, 1.2) A), weighted, summed, divided."""
    A = batch["advantages"].unsqueeze(1)  # (B, 1)
    per_token = -torch.minimum(r * A, r.clamp(0.8, 1.2) * A)
    return (per_token * weight).sum() / denominator


@pytest.mark.parametrize("normalizer", ["response_tokens", "senior_tokens"])
def test_loss_normalizer_matches_hand_computed_token_mean(train_inputs, tmp_path, normalizer):
    """response_tokens (the paper's verl gate): senior tokens in the numerator, every response token of the
    batch in the denominator. senior_tokens (TRL's env_mask alone): senior tokens in both."""
    kw = {} if normalizer == "response_tokens" else {"loss_normalizer": normalizer}  # the default is the paper's
    run = build_run(train_cfg(train_inputs, tmp_path, **kw), print_fn=lambda *_: None)
    batch, _ = first_batch(run)
    batch["advantages"] = torch.tensor([1.0, -1.0, 0.5, -2.0] * 2)  # (B,) fixed so every branch of min() is hit
    response = batch["completion_mask"].float()  # (B, T)
    senior = response * batch["tool_mask"].float()
    assert 0 < senior.sum() < response.sum()
    loss, r = _fixed_ratio_loss(run.trainer, batch)
    expected = _by_hand(batch, r, senior, response.sum() if normalizer == "response_tokens" else senior.sum())
    torch.testing.assert_close(loss, expected)


def test_junior_token_weight_one_is_the_grpo_loss_on_the_same_batch(train_inputs, tmp_path):
    """w = 1: junior tokens enter the clipped objective like senior ones, so the loss is vanilla GRPO's
    token mean over every response token (by hand, and TRL's own loss with no senior mask)."""
    run = build_run(train_cfg(train_inputs, tmp_path, junior_token_weight=1.0), print_fn=lambda *_: None)
    trainer = run.trainer
    batch, _ = first_batch(run)
    batch["advantages"] = torch.tensor([1.0, -1.0, 0.5, -2.0] * 2)
    response = batch["completion_mask"].float()
    assert (response * (1 - batch["tool_mask"].float())).sum() > 0  # junior tokens present
    loss, r = _fixed_ratio_loss(trainer, batch)
    torch.testing.assert_close(loss, _by_hand(batch, r, response, response.sum()))
    vanilla = {k: v for k, v in batch.items() if k != "tool_mask"}
    vanilla["num_items_in_batch"] = response.sum()
    trainer.method, trainer.junior_token_weight = method_kind("grpo"), 0.0  # a row that needs no senior mask
    grpo, _ = _fixed_ratio_loss(trainer, vanilla)
    torch.testing.assert_close(loss, grpo)


def test_junior_token_weight_scales_junior_tokens(train_inputs, tmp_path):
    """0 < w < 1: a junior token counts w times a senior token in the numerator; the denominator stays."""
    run = build_run(train_cfg(train_inputs, tmp_path, junior_token_weight=0.25), print_fn=lambda *_: None)
    batch, _ = first_batch(run)
    batch["advantages"] = torch.tensor([1.0, -1.0, 0.5, -2.0] * 2)
    response = batch["completion_mask"].float()
    senior = response * batch["tool_mask"].float()
    loss, r = _fixed_ratio_loss(run.trainer, batch)
    torch.testing.assert_close(loss, _by_hand(batch, r, senior + 0.25 * (response - senior), response.sum()))


def test_rerunning_a_finished_run_is_a_no_op(train_inputs, tmp_path):
    cfg = train_cfg(train_inputs, tmp_path, max_steps=2, save_every=1)
    first = train(cfg, print_fn=lambda *_: None)
    run = tmp_path / "run"
    snapshot = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    said = []
    again = train(cfg, print_fn=said.append)
    assert again["steps"] == first["steps"] == 2 and "complete" in said[0]
    after = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == snapshot  # no step 3, final/ and log.jsonl untouched, no checkpoint deleted
    card = (run / "final" / "README.md").read_text()
    assert "None" not in card and str(train_inputs[1]) in card and str(train_inputs[2]) in card and "steps: 2" in card
    # killed after the last checkpoint but before final/ and summary.json: finish without a third step
    import shutil
    shutil.rmtree(run / "final")
    (run / "summary.json").unlink()
    assert train(cfg, print_fn=lambda *_: None)["steps"] == 2
    assert (run / "log.jsonl").read_bytes() == snapshot[run / "log.jsonl"] and (run / "final").is_dir()
    assert not (run / "checkpoint-3").exists()


def test_a_run_is_recognised_however_its_path_is_spelled_and_after_a_move(train_inputs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = train_cfg(train_inputs, tmp_path, max_steps=1, save_every=1, output_dir="runs/x")
    train(cfg, print_fn=lambda *_: None)
    for spelling in ("./runs/x", "runs/x/", str(tmp_path / "runs" / "x")):
        assert train(train_cfg(train_inputs, tmp_path, max_steps=1, save_every=1, output_dir=spelling),
                     print_fn=lambda *_: None)["steps"] == 1
    import shutil
    shutil.move(tmp_path / "runs" / "x", tmp_path / "moved")
    assert train(train_cfg(train_inputs, tmp_path, max_steps=1, save_every=1, output_dir="moved"),
                 print_fn=lambda *_: None)["steps"] == 1
    # paths stored in the run are absolute: they work from another directory
    stored = json.loads((tmp_path / "moved" / "config.json").read_text())
    assert stored["senior"] == str(train_inputs[1].resolve()) and stored["dataset"] == str(train_inputs[3].resolve())


def test_a_second_training_writer_is_refused_naming_the_holder(train_inputs, tmp_path):
    from tandem_rlvr.outdir import RunLock
    import os
    import socket
    (tmp_path / "run").mkdir()
    with RunLock(tmp_path / "run"):
        # flock is per open file: a second lock in this process conflicts like another process would
        with pytest.raises(TandemError, match=f"pid {os.getpid()} on host {socket.gethostname()}"):
            train(train_cfg(train_inputs, tmp_path, max_steps=1), print_fn=lambda *_: None)
    assert train(train_cfg(train_inputs, tmp_path, max_steps=1),
                 print_fn=lambda *_: None)["steps"] == 1  # released: runs


def test_a_run_that_fails_before_its_first_checkpoint_leaves_nothing(train_inputs, tmp_path, monkeypatch):
    from tandem_rlvr.rl.trainer import TandemGRPOTrainer

    def boom(self, *a, **k):
        raise TandemError("injected failure in step 1")

    monkeypatch.setattr(TandemGRPOTrainer, "train", boom)
    with pytest.raises(TandemError, match="injected"):
        train(train_cfg(train_inputs, tmp_path, max_steps=1), print_fn=lambda *_: None)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("where", ["assembly", "run"])
def test_a_failed_start_removes_what_it_wrote_and_keeps_what_was_there(train_inputs, tmp_path, monkeypatch, where):
    """One cleanup for a failure while the trainer is built and while it trains: the start's files go,
    a file that was in the directory before it (a user's README.md) stays."""
    from tandem_rlvr.rl.trainer import TandemGRPOTrainer

    def boom(self, *a, **k):
        raise TandemError("injected failure")

    monkeypatch.setattr(TandemGRPOTrainer, "__init__" if where == "assembly" else "train", boom)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "README.md").write_text("my notes\n")
    with pytest.raises(TandemError, match="injected"):
        train(train_cfg(train_inputs, tmp_path, max_steps=1), print_fn=lambda *_: None)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["README.md"]
    assert (tmp_path / "run" / "README.md").read_text() == "my notes\n"


@pytest.mark.parametrize("key,value,needle",
                         [("scale_rewards", "no", "expected bool"), ("max_steps", 2.5, "expected int"),
                          ("lr", "fast", "expected float"), ("schedule", "wrod", "valid: "),
                          ("eval_every", True, "expected int"), ("template", 3, "expected str")])
def test_config_values_are_type_checked_naming_the_key(tmp_path, key, value, needle):
    import yaml
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump({key: value}))
    with pytest.raises(TandemError) as e:
        load_train_config("tiny", str(f))
    assert key in str(e.value) and needle in str(e.value)


def test_yaml_no_is_the_boolean_false_and_whole_numbers_are_kept(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("scale_rewards: no\nmax_steps: 3.0\nlr: 1e-6\n")  # YAML 1.1: bare no is false; 1e-6 is a string
    cfg = load_train_config("tiny", str(f))
    assert cfg.loss.scale_rewards is False and cfg.loop.max_steps == 3 and cfg.loss.lr == 1e-6


def test_kl_monitor_is_the_k3_sum_over_senior_tokens_from_a_plain_forward(tok):
    """kl/junior's (sum, count): k3 = exp(r) - r - 1, r = log p_jun - log p_sen, over senior-written
    tokens only, with the junior's log-probs from a plain full forward at temperature 0.7."""
    from types import SimpleNamespace as NS

    from conftest import make_model
    from tandem_rlvr.rl.rollout import TandemRollout

    junior = make_model(len(tok), 3)
    ro = object.__new__(TandemRollout)
    ro.junior, ro.tok, ro.sampling = junior, tok, NS(temperature=0.7)
    ids = [tok.encode("Mia has 7 shells."), tok.encode("Tom")]
    comps = [tok.encode(" She finds 5 more."), tok.encode(" buys 3 apples")]
    masks = [[1, 0] + [1] * (len(comps[0]) - 2), [0] * len(comps[1])]
    g = torch.Generator().manual_seed(0)
    sen_lp = [(-torch.rand(len(c), generator=g) * 3).tolist() for c in comps]
    tot, n, lp_tot, lp_n = ro._kl_to_junior(ids, comps, masks, sen_lp)
    want, count, want_lp = 0.0, 0, 0.0
    with torch.no_grad():
        for p, c, m, ls in zip(ids, comps, masks, sen_lp, strict=True):
            logits = junior(torch.tensor([p + c])).logits[0, len(p) - 1: len(p) + len(c) - 1] / 0.7
            lj = torch.log_softmax(logits.double(), -1)[torch.arange(len(c)), torch.tensor(c)]
            want_lp += float(lj.sum())  # junior/logprob: every emitted token, whoever wrote it
            for t in range(len(c)):
                if m[t]:
                    r = float(lj[t]) - ls[t]
                    want += torch.exp(torch.tensor(r, dtype=torch.float64)).item() - r - 1
                    count += 1
    assert n == count == len(comps[0]) - 1
    assert tot == pytest.approx(want, rel=1e-4)
    assert lp_n == len(comps[0]) + len(comps[1]) and lp_tot == pytest.approx(want_lp, rel=1e-4)



def test_a_run_whose_best_is_step_0_says_best_holds_the_untrained_senior(train_inputs, tmp_path):
    # random one-layer models answer no validation problem: accuracy 0 at every step, and a later step must
    # score strictly higher to become best, so best/ stays the step-0 senior
    lines = []
    summary = train(train_cfg(train_inputs, tmp_path, max_steps=2, eval_every=1, save_every=2), print_fn=lines.append)
    assert summary["best"] == {"accuracy": 0.0, "step": 0} and summary["best_is_untrained"] is True
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["best_is_untrained"] is True
    assert any("best/ holds the untrained senior" in str(line) for line in lines)
    # without validation there is no best at all, and nothing to say
    other = train(train_cfg(train_inputs, tmp_path / "b", max_steps=1, eval_every=0), print_fn=lambda *_: None)
    assert "best_is_untrained" not in other
