"""Training with a junior pool (issue 36): a one-junior pool is today's run bit for bit, every rollout's
junior is drawn from its stable coordinates and recorded, per-junior figures are the raw counts of the
rollout log, validation runs per junior and best/ follows ``best_by_junior``, the plan counts every
junior, and a bad pool is refused before any model loads."""

import json
import math
import shutil
import zlib

import pytest
import torch
from safetensors.torch import load_file

from tandem_rlvr import cli
from tandem_rlvr.config import load_train_config
from tandem_rlvr.rl.assemble import build_run
from tandem_rlvr.rl.pool_log import junior_figures
from tandem_rlvr.rl.train import train

from conftest import make_model, save_training_inputs
from helpers.train import one_junior_pool

# a reward that differs between rollouts (random models never answer right): share of distinct characters
REWARDS = "def variety(completions, **kw):\n    return [len(set(c)) / (1 + len(c)) for c in completions]\n"


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tok):
    """The training inputs of conftest, a byte-identical copy of the junior at another path, a second
    junior of other weights (seed 2), and the reward above."""
    root = save_training_inputs(tmp_path_factory.mktemp("pool"), tok)
    shutil.copytree(root / "junior", root / "junior_copy")
    make_model(len(tok), 2, hidden=32, layers=1).save_pretrained(root / "other")
    tok.save_pretrained(root / "other")
    (root / "rewards.py").write_text(REWARDS)
    return root


def _cfg(root, out, **kw):
    base = dict(senior=str(root / "senior"), junior=str(root / "junior"), dataset=str(root / "data.jsonl"),
                dataset_split=None, val_size=4, template="plain", lr=1e-2, group_size=4, prompts_per_step=2,
                prompts_per_minibatch=2, max_prompt_tokens=64, max_new_tokens=12, temperature=1.0, max_steps=2,
                eval_every=1, save_every=1, kl_every=1, output_dir=str(out), reward_terms="user",
                reward=f"{root / 'rewards.py'}:variety")
    base.update(kw)
    return load_train_config(None, None, base)


def _first_batch(cfg):
    """Tokens, senior mask, advantages and loss of the run's first generation batch (TRL's own pipeline)."""
    run = build_run(cfg, print_fn=lambda *_: None)
    try:
        trainer = run.trainer
        trainer.model.train()
        batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
        trainer.current_gradient_accumulation_steps = 1
        with torch.no_grad():
            loss = trainer._compute_loss(trainer.model, batch)
        return {k: batch[k].clone() for k in ("completion_ids", "completion_mask", "tool_mask", "advantages")}, loss
    finally:
        run.close(failed=True)


def _records(out) -> list[dict]:
    return [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]


def _same_run_figures(rec: dict) -> dict:
    """A log record without wall-clock times (ours, TRL's step_time) and the pool's own keys (a one-junior
    run has none)."""
    return {k: v for k, v in rec.items()
            if k != "step_time" and not k.startswith(("wall/", "junior/junior", "val/junior/", "val/best_by"))}


@pytest.mark.parametrize("pool", ["yaml-one", "two-copies"])
def test_a_one_junior_pool_trains_bit_for_bit_as_the_plain_junior(setup, tmp_path, pool):
    # yaml-one: the pool file of one junior; two-copies: the junior and its byte copy drawn per rollout, so
    # every batch is decoded in two sub-batches whose rows must come out as the whole batch's did
    kw = one_junior_pool(setup, tmp_path, pool)
    plain, pooled = _cfg(setup, tmp_path / "plain"), _cfg(setup, tmp_path / "pool", **kw)
    (a, loss_a), (b, loss_b) = _first_batch(plain), _first_batch(pooled)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert torch.equal(loss_a, loss_b) and a["advantages"].abs().sum() > 0  # a loss that moves the weights
    train(plain, print_fn=lambda *_: None)
    train(pooled, print_fn=lambda *_: None)
    wa, wb = load_file(tmp_path / "plain/final/model.safetensors"), load_file(tmp_path / "pool/final/model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    ra, rb = _records(tmp_path / "plain"), _records(tmp_path / "pool")
    if pool == "two-copies":  # the KL monitor scores each junior's rows in its own forward pass (rows and padding
        # of another shape): its figure may round differently in the last bits; it enters no loss or update
        ka, kb = ([r.get("kl/junior") for r in x] for x in (ra, rb))
        assert [k is None for k in ka] == [k is None for k in kb]  # logged at the same steps
        assert [k for k in ka if k is not None] == pytest.approx([k for k in kb if k is not None], rel=1e-6)
        ra, rb = ([{k: v for k, v in r.items() if k != "kl/junior"} for r in x] for x in (ra, rb))
    assert [_same_run_figures(r) for r in ra] == [_same_run_figures(r) for r in rb]
    if pool == "two-copies":  # both copies drew rows, so the batch really was split
        drawn = {r["junior"] for r in map(json.loads, (tmp_path / "pool/rollouts.jsonl").read_text().splitlines())}
        assert drawn == {"junior", "junior_copy"}
    else:
        assert not (tmp_path / "pool/rollouts.jsonl").exists()  # a one-junior run writes what it wrote before


def test_the_hf_engine_decodes_each_row_with_its_own_junior(setup, tok):
    """A pool spec opens every junior; a batch of mixed juniors gives each row the tokens and senior mask
    a whole batch decoded with that junior alone gives it (sub-batches of another size and padding)."""
    from tandem_rlvr.decoding.sampling import SamplingParams
    from tandem_rlvr.engines.base import EngineSetup, RolloutSpec, open_engine
    from tandem_rlvr.prompting import encode_prompt

    senior = str(setup / "senior")
    pooled = open_engine("hf", EngineSetup(senior, f"{setup / 'junior'},{setup / 'other'}", "cpu"))
    alone = [open_engine("hf", EngineSetup(senior, str(setup / name), "cpu")) for name in ("junior", "other")]
    prompts = [encode_prompt(tok, f"Mia has {7 ** i} shells. She finds 5 more.") for i in range(6)]  # lengths differ
    seeds, juniors = list(range(100, 106)), [0, 1, 1, 0, 1, 0]
    spec = RolloutSpec("word", SamplingParams(1.0, 1.0, 0, 12), 0.5, 32)
    got = pooled.generate(prompts, seeds, spec, juniors=juniors)
    ref = [engine.generate(prompts, seeds, spec) for engine in alone]
    assert len(pooled.juniors) == 2 and len({len(p) for p in prompts}) > 1
    for b, j in enumerate(juniors):
        assert got.row_tokens(b) == ref[j].row_tokens(b) and got.row_mask(b) == ref[j].row_mask(b)
        # log-probs to float rounding: another sub-batch pads the prompts to another width
        assert torch.allclose(got.logprobs[b, : got.lengths[b]], ref[j].logprobs[b, : ref[j].lengths[b]], atol=1e-5)
    assert any(ref[0].row_tokens(b) != ref[1].row_tokens(b) for b in range(6))  # the two juniors write differently


def _rollouts(out) -> list[dict]:
    return [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]


def _sha_draw(seed, step, key, k, weights) -> int:
    """The pool's draw written out: the first 8 bytes of sha256 as a uniform, then the inverse CDF."""
    import hashlib

    u = int.from_bytes(hashlib.sha256(f"tandem-junior-pool|{seed}|{step}|{zlib.crc32(key.encode())}|{k}".encode())
                       .digest()[:8], "big") / 2**64
    acc = 0.0
    for j, w in enumerate(weights[:-1]):
        acc += w
        if u < acc:
            return j
    return len(weights) - 1


@pytest.fixture(scope="module")
def pool_run(setup, tmp_path_factory):
    """Three updates with a two-junior pool drawn per group (0.8 / 0.2), then the same run killed after
    update 2 and resumed."""
    out = tmp_path_factory.mktemp("poolrun") / "run"
    cfg = _cfg(setup, out, junior=f"{setup / 'junior'}:0.8,{setup / 'other'}:0.2", max_steps=3, eval_every=0,
               save_total_limit=3)
    train(cfg, print_fn=lambda *_: None)
    whole = (out / "rollouts.jsonl").read_text()
    log_whole = _records(out)
    shutil.rmtree(out / "checkpoint-3")
    shutil.rmtree(out / "final")
    (out / "summary.json").unlink()
    train(cfg, print_fn=lambda *_: None)
    return out, whole, log_whole


def test_each_rollout_records_its_drawn_junior_and_a_resumed_run_redraws_the_same(pool_run):
    out, whole, _ = pool_run
    rows = _rollouts(out)
    assert (out / "rollouts.jsonl").read_text() == whole  # the regenerated step wrote exactly its rows again
    assert [r["step"] for r in rows] == [s for s in (0, 1, 2) for _ in range(8)]
    labels = ("junior", "other")
    for r in rows:  # group draw: copy index 0 for every rollout of a group, keyed by the problem's id
        assert r["junior"] == labels[_sha_draw(0, r["step"], r["problem_id"], 0, (0.8, 0.2))]
    groups = {}
    for r in rows:
        groups.setdefault((r["step"], r["problem_id"]), set()).add(r["junior"])
    assert all(len(v) == 1 for v in groups.values())  # a GRPO group shares its junior


def test_per_junior_log_figures_are_the_raw_counts_of_the_rollout_log(pool_run):
    out, _, _ = pool_run
    rows, recs = _rollouts(out), [r for r in _records(out) if "reward/mean" in r]
    assert [r["step"] for r in recs] == [1, 2, 3]
    empty_seen = False
    for rec in recs:
        mine = [r for r in rows if r["step"] == rec["step"] - 1]
        for label in ("junior", "other"):
            sel = [r for r in mine if r["junior"] == label]
            assert rec[f"junior/{label}/count"] == len(sel)
            if not sel:  # no figure of an empty set
                empty_seen = True
                assert not any(k.startswith(f"junior/{label}/") and k != f"junior/{label}/count" for k in rec)
                continue
            assert rec[f"junior/{label}/reward"] == pytest.approx(sum(r["reward"] for r in sel) / len(sel))
            assert rec[f"junior/{label}/senior_share"] == pytest.approx(sum(r["senior_share"] for r in sel) / len(sel))
            assert rec[f"junior/{label}/length"] == pytest.approx(sum(r["length"] for r in sel) / len(sel))
        # the pool's figures add up to the step's: TRL's reward mean is the rows' mean
        assert rec["reward/mean"] == pytest.approx(sum(r["reward"] for r in mine) / len(mine))
    assert empty_seen  # at 0.8 / 0.2 over two groups a step without the second junior occurs (seed 0: step 1)


def test_junior_figures_by_hand():
    got = junior_figures(("a", "b", "c"), [0, 2, 0, 0], [1.0, 0.5, float("nan"), 0.0], [0.5, 1.0, 0.25, 0.75],
                         [10, 20, 30, 40])
    assert got == {"junior/a/count": 3, "junior/a/reward": 0.5, "junior/a/senior_share": 0.5, "junior/a/length": 80 / 3,
                   "junior/b/count": 0, "junior/c/count": 1, "junior/c/reward": 0.5, "junior/c/senior_share": 1.0,
                   "junior/c/length": 20.0}


# scripted validation accuracies (step -> per junior): by the pool's mean (weights 0.75, 0.25) step 1 is
# best (0.75 * 0.6 + 0.25 * 0.2 = 0.50 against 0.45 at step 2); by the second junior step 2 is (0.9)
SCRIPT = {0: (0.1, 0.1), 1: (0.6, 0.2), 2: (0.3, 0.9)}


@pytest.mark.parametrize("by,step,best", [("pool-mean", 1, 0.5), ("other", 2, 0.9)])
def test_validation_runs_per_junior_and_best_follows_the_setting(setup, tmp_path, monkeypatch, by, step, best):
    from tandem_rlvr.rl.callbacks import Validation

    asked = []

    def scripted(self, model, step=0, junior=None):
        asked.append((step, junior))
        return SCRIPT[step][junior]

    monkeypatch.setattr(Validation, "accuracy", scripted)
    cfg = _cfg(setup, tmp_path / "run", junior=f"{setup / 'junior'}:3,{setup / 'other'}:1", best_by_junior=by)
    train(cfg, print_fn=lambda *_: None)
    assert asked == [(s, j) for s in (0, 1, 2) for j in (0, 1)]  # every validation decodes with each junior
    vals = [r for r in _records(tmp_path / "run") if "val/accuracy" in r]
    for r in vals:
        a, b = SCRIPT[r["step"]]
        assert r["val/junior/junior/accuracy"] == a and r["val/junior/other/accuracy"] == b
        assert r["val/accuracy"] == pytest.approx(0.75 * a + 0.25 * b) and r["val/best_by"] == by
    assert json.loads((tmp_path / "run/best/best.json").read_text()) == pytest.approx({"accuracy": best, "step": step,
                                                                                        "by": by})
    assert vals[-1]["val/best"] == pytest.approx(best) and vals[-1]["val/best_step"] == step


def test_a_pool_validates_each_junior_with_the_same_row_seeds(setup, tmp_path):
    """The rows of one validation problem get the same coins with every junior (a paired comparison):
    with two byte-identical juniors the two accuracies and the decoded rows are equal."""
    from tandem_rlvr.rl.callbacks import Validation

    cfg = _cfg(setup, tmp_path / "run", junior=f"{setup / 'junior'},{setup / 'junior_copy'}", eval_every=0)
    run = build_run(cfg, print_fn=lambda *_: None)
    try:
        seen = []
        engine = run.validation.engine
        inner = engine.generate

        def spy(prompts, seeds, spec, juniors=None):
            roll = inner(prompts, seeds, spec, juniors=juniors)
            seen.append((list(seeds), juniors, roll.tokens.clone()))
            return roll

        engine.generate = spy
        model = run.trainer.model
        accs = [Validation.accuracy(run.validation, model, 0, j) for j in (0, 1)]
    finally:
        run.close(failed=True)
    assert accs[0] == accs[1]
    (s0, j0, t0), (s1, j1, t1) = seen
    assert s0 == s1 and set(j0) == {0} and set(j1) == {1} and torch.equal(t0, t1)


def test_the_memory_plan_counts_every_junior_on_its_device(setup):
    from tandem_rlvr.planner.memory import plan

    cfg = _cfg(setup, "unused", junior=f"{setup / 'junior'},{setup / 'other'}", junior_device="cuda:1,cuda:2",
               senior_device="cuda:0")
    p = plan(cfg, gpu_gib=80.0)
    params = sum(t.numel() for t in load_file(setup / "junior/model.safetensors").values())  # both: 1 layer, width 32
    for dev, label in (("cuda:1", "junior"), ("cuda:2", "other")):
        items = [it for it in p.items if it.device == dev]
        weights = [it for it in items if it.phase == "resident"]
        assert len(weights) == 1 and label in weights[0].name and weights[0].nbytes == params * 2  # bf16 on a GPU
        kv = [it for it in items if it.phase == "rollout" and "junior KV cache" in it.name]
        assert len(kv) == 1  # sized for the whole batch: a draw may give one junior every row
        # 8 rows x (64 + 12) tokens x 1 layer x (K and V) x 2 kv heads x head_dim 8 x 2 bytes
        assert kv[0].nbytes == 8 * 76 * 1 * 2 * 2 * 8 * 2
    shared = plan(cfg.with_keys(junior_device="cuda:1"), gpu_gib=80.0)
    on1 = [it for it in shared.items if it.device == "cuda:1"]
    assert sum(it.phase == "resident" for it in on1) == 2  # both juniors' weights on the one device
    assert sum("junior KV" in it.name for it in on1 if it.phase == "rollout") == 1  # decoded in turn


def test_the_vllm_memory_plan_holds_every_junior_in_the_engine(setup):
    """On CPU the vLLM engine's line is its KV cache plus the weights it holds: the senior and, with a pool,
    every junior (one engine holds them all), in fp32."""
    from tandem_rlvr.planner.memory import plan

    def params(name):
        return sum(t.numel() for t in load_file(setup / name / "model.safetensors").values())

    for junior, names in ((str(setup / "junior"), ("junior",)),
                          (f"{setup / 'junior'},{setup / 'other'}", ("junior", "other"))):
        cfg = _cfg(setup, "unused", junior=junior, engine="vllm", vllm_kv_cache_gib=0.5, eval_every=0)
        lines = [it for it in plan(cfg).items if it.phase == "rollout" and it.name.startswith("vLLM engine")]
        want = 0.5 * (1 << 30) + 4 * (params("senior") + sum(params(n) for n in names))
        assert len(lines) == 1 and lines[0].nbytes == want, (junior, lines)


def test_a_colocated_vllm_engine_is_sized_for_every_junior_of_the_pool(setup):
    """The layouts table's colocated engine (planner/layouts.vllm_need): a second junior adds its bf16 weights and
    the KV cache of one rollout batch over its layers (the engine runs every junior on every token)."""
    from tandem_rlvr.planner.layouts import vllm_need

    one = _cfg(setup, "unused")
    two = _cfg(setup, "unused", junior=f"{setup / 'junior'},{setup / 'other'}")
    params = sum(t.numel() for t in load_file(setup / "other/model.safetensors").values())
    # 8 rows (2 prompts x 4) x (64 + 12) tokens x 1 layer x (K and V) x 2 kv heads x head_dim 8 x 2 bytes (bf16)
    assert vllm_need(two, 1) - vllm_need(one, 1) == params * 2 + 8 * 76 * 1 * 2 * 2 * 8 * 2


@pytest.mark.parametrize("flags,needle", [
    (["--junior", "a,,b"], "empty name"),
    (["--junior", "a:1,b"], "every junior or to none"),
    (["--junior", "JUNIOR,OTHER", "--method", "klreg"], "needs --method tandem"),
    (["--junior", "JUNIOR,OTHER", "--best-by-junior", "nobody"], "best_by_junior: junior 'nobody' is not in the pool"),
    (["--junior", "JUNIOR,OTHER", "--junior-device", "cpu,cpu,cpu"], "one device for all juniors or one per junior"),
    # a pool may mix tokenizers (tests/unit/engines/test_xtandem_pool.py), but not on a schedule that cannot hand
    # off between them
    (["--junior", "JUNIOR,tiny-xjunior", "--schedule", "word-atomic"], "junior tiny-xjunior of the pool has another "
                                                                          "tokenizer than the senior: schedule"),
    (["--junior", "JUNIOR,ROOT/missing"], "missing"),
])
def test_a_bad_pool_is_one_line_before_any_model_loads(setup, tmp_path, capsys, monkeypatch, flags, needle):
    import tandem_rlvr.models as models

    def no_load(*a, **k):
        raise AssertionError("a model loaded before the pool was checked")

    monkeypatch.setattr(models, "load_model", no_load)
    names = {"JUNIOR": setup / "junior", "OTHER": setup / "other", "ROOT": setup}
    for word, path in names.items():
        flags = [f.replace(word, str(path)) for f in flags]
    argv = ["train", "--senior", str(setup / "senior"), "--dataset", str(setup / "data.jsonl"), "--template", "plain",
            "--output-dir", str(tmp_path / "run"), *flags]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tandem: error: ") and "\n" not in err and needle in err, err
    assert not (tmp_path / "run").exists()


def test_a_pool_from_a_yaml_list_is_recorded_as_its_canonical_spec_and_another_pool_is_refused(setup, tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text(f"junior:\n  - {{name: {setup / 'junior'}, weight: 3}}\n  - {{name: {setup / 'other'}, weight: 1}}\n")
    cfg = load_train_config(None, str(f), {})
    assert cfg.models.junior == f"{setup / 'junior'}:0.75,{setup / 'other'}:0.25"
    from tandem_rlvr.rl.run_identity import check_run_dir, stored_config
    from tandem_rlvr.errors import TandemError

    run = cfg.with_keys(output_dir=str(tmp_path / "run"))
    (tmp_path / "run").mkdir()
    (tmp_path / "run/config.json").write_text(json.dumps(stored_config(run)))
    assert check_run_dir(run) == 0
    with pytest.raises(TandemError, match="different junior"):
        check_run_dir(run.with_keys(junior=f"{setup / 'junior'}:0.5,{setup / 'other'}:0.5"))
    assert math.isclose(sum(cfg.models.pool.weights), 1.0)


def test_the_kl_monitor_scores_each_row_under_its_own_junior(tok):
    """A pool's kl/junior sums: each row's k3 terms and junior log-probs under the junior it drew, the
    same as scoring that row alone with that junior."""
    from types import SimpleNamespace as NS

    from tandem_rlvr.rl.rollout import TandemRollout

    juniors = (make_model(len(tok), 3), make_model(len(tok), 4))
    ro = object.__new__(TandemRollout)
    ro.tok, ro.sampling, ro.junior, ro.juniors = tok, NS(temperature=0.7), juniors[0], juniors
    ids = [tok.encode("Mia has 7 shells."), tok.encode("Tom"), tok.encode("Ana has 2.")]
    comps = [tok.encode(" She finds 5 more."), tok.encode(" buys 3 apples"), tok.encode(" So 2.")]
    masks = [[1, 0] + [1] * (len(comps[0]) - 2), [1] * len(comps[1]), [i % 2 for i in range(len(comps[2]))]]
    sen_lp = [[-0.5] * len(c) for c in comps]
    drawn = [1, 0, 1]
    got = ro._kl_to_junior(ids, comps, masks, sen_lp, drawn)
    want = [0.0, 0, 0.0, 0]
    for b, j in enumerate(drawn):  # each row alone, under its junior
        one = object.__new__(TandemRollout)
        one.tok, one.sampling, one.junior = tok, ro.sampling, juniors[j]
        for i, x in enumerate(one._kl_to_junior(ids[b:b + 1], comps[b:b + 1], masks[b:b + 1], sen_lp[b:b + 1])):
            want[i] += x
    assert got[1] == want[1] and got[3] == want[3]
    assert got[0] == pytest.approx(want[0], rel=1e-5) and got[2] == pytest.approx(want[2], rel=1e-5)
    assert got[0] != pytest.approx(ro._kl_to_junior(ids, comps, masks, sen_lp)[0], rel=1e-3)  # the juniors differ
