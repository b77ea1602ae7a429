"""The paper's data protocol in training (issue 33): its held-out draw, every save's weights kept,
and over-long prompts dropped up front (verl's ``filter_overlong_prompts``)."""

import json
import types

import pytest
import torch

from tandem_rlvr.errors import TandemError
from tandem_rlvr.rl.prepare import drop_overlong_prompts, held_out_rows, split_problems

from helpers.train import train_cfg


def test_pandas_draw_is_dataframe_sample_with_the_same_random_state():
    pd = pytest.importorskip("pandas")
    # numpy's RandomState(0).permutation(10) begins 2, 8, 4, 9 (pandas samples without replacement
    # through RandomState.choice, which takes that permutation's head)
    assert held_out_rows(10, 4, 0, "pandas") == [2, 8, 4, 9]
    for n, k, seed in ((10, 4, 0), (40309, 1000, 0), (57, 13, 7)):
        frame = pd.DataFrame({"row": range(n)})
        assert held_out_rows(n, k, seed, "pandas") == list(frame.sample(n=k, random_state=seed).index)


def test_paper_draw_holds_out_those_rows_in_sample_order_and_trains_on_the_rest(train_inputs, tmp_path):
    cfg = train_cfg(train_inputs, tmp_path, val_size=4, val_draw="pandas", seed=0)
    train, val = split_problems(cfg)
    # the fixture's 40 problems have answers i + 5; numpy.random.RandomState(0).permutation(40) begins 22, 20, 25, 4
    assert [p.answer for p in val] == [str(i + 5) for i in (22, 20, 25, 4)]
    assert [p.answer for p in train] == [str(i + 5) for i in range(40) if i not in (22, 20, 25, 4)]


def test_paper_preset_holds_out_1000_rows_by_pandas_draw_and_keeps_every_saves_weights():
    from tandem_rlvr.config import load_train_config

    cfg = load_train_config("qwen3-4b-deepscaler", None, {})
    assert (cfg.data.val_size, cfg.data.val_draw, cfg.loop.seed, cfg.loop.keep_weights,
            cfg.loop.save_total_limit) == (1000, "pandas", 0, True, 1)


def test_disk_plan_counts_checkpoints_and_kept_weights_by_hand():
    from tandem_rlvr.config import load_train_config
    from tandem_rlvr.planner.memory import Shape, disk_plan, model_config

    cfg = load_train_config("qwen3-4b-deepscaler", None, {})
    params = Shape.of(model_config(cfg.models.senior)).params
    text = disk_plan(cfg)
    # fp32 weights + two fp32 AdamW moments = 12 bytes a parameter; bf16 exports 2 bytes a parameter
    assert f"{params * 12 / 2**30:.2f} GiB" in text and f"{params * 2 / 2**30:.2f} GiB more per save" in text


def test_keep_weights_exports_each_save_loadable_and_never_prunes(tmp_path, tok):
    from transformers import AutoModelForCausalLM

    from conftest import make_model
    from tandem_rlvr.rl.callbacks import Validation

    cb = Validation.__new__(Validation)
    cb.cfg = types.SimpleNamespace(loop=types.SimpleNamespace(keep_weights=True, updates_per_batch=2))
    cb.run_dir, cb.tok, cb.dtype, cb.trainer = tmp_path, tok, torch.float32, None
    model = make_model(len(tok), 0, hidden=32, layers=1)
    for step in (2, 4):
        cb.on_save(None, types.SimpleNamespace(global_step=step, is_world_process_zero=True), None, model=model)
    for step in (2, 4):
        out = tmp_path / "weights" / f"checkpoint-{step}"
        assert json.loads((out / "step.json").read_text()) == {"step": step, "rollout_step": step // 2}
        loaded = AutoModelForCausalLM.from_pretrained(out)
        assert loaded.lm_head.weight.equal(model.lm_head.weight)
    assert sorted(p.name for p in (tmp_path / "weights").iterdir()) == ["checkpoint-2", "checkpoint-4"]


def _prep(tok, max_prompt_tokens, lengths):
    """A Prepared-like object whose problems' prompts are ``n`` words long (plain template)."""
    from tandem_rlvr.data.benchmarks import Problem
    from tandem_rlvr.rl.prepare import Prepared
    from tandem_rlvr.tasks.answers import MathTask

    problems = [Problem("x", str(i), " ".join(["M"] * n), "1", None, {}) for i, n in enumerate(lengths)]
    cfg = types.SimpleNamespace(data=types.SimpleNamespace(max_prompt_tokens=max_prompt_tokens),
                                loop=types.SimpleNamespace(prompts_per_step=2))
    return Prepared(cfg, types.SimpleNamespace(tokenizer=tok), problems[:-1], problems[-1:], "plain", MathTask())


def test_overlong_prompts_leave_the_data_up_front_with_a_count(tok, caplog):
    prep = _prep(tok, 20, [3, 30, 5, 40, 4, 2])
    lengths = [len(tok.encode(prep.prompt_text(p))) for p in prep.train]
    want = [p.problem_id for p, n in zip(prep.train, lengths, strict=True) if n <= 20]
    assert len(want) == 3  # the 30- and 40-word problems are over 20 tokens, the others are not
    with caplog.at_level("WARNING", logger="tandem_rlvr"):
        drop_overlong_prompts(prep)
    assert [p.problem_id for p in prep.train] == want and len(prep.val) == 1
    assert "training set: dropped 2 of 5 problems whose prompt is over max_prompt_tokens=20" in caplog.text


def test_too_few_prompts_within_the_limit_is_an_error(tok):
    with pytest.raises(TandemError, match="1 train problems have a prompt within max_prompt_tokens=20"):
        drop_overlong_prompts(_prep(tok, 20, [30, 3, 40, 2]))


def test_macro_pass_at_n_averages_benchmarks_of_solved_problems_by_hand():
    from tandem_rlvr.rl.callbacks import macro_pass_at_n

    # aime: problem 0 solved by one of 2 samples, problem 1 by none -> 1/2; amc: problem 2 solved -> 1
    benchmarks = ["aime", "aime", "aime", "aime", "amc", "amc"]
    problems = [0, 0, 1, 1, 2, 2]
    correct = [0.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    assert macro_pass_at_n(benchmarks, problems, correct) == pytest.approx((0.5 + 1.0) / 2)


def test_paper_test_sets_validation_uses_the_older_stacks_sets_and_trains_on_everything(train_inputs, tmp_path, caplog):
    cfg = train_cfg(train_inputs, tmp_path, validation="paper-test-sets", eval_n=4)
    with caplog.at_level("WARNING", logger="tandem_rlvr"):
        train, val = split_problems(cfg)
    assert len(train) == 40 and "selects checkpoints on the test sets" in caplog.text
    counts = {}
    for p in val:
        counts[p.benchmark] = counts.get(p.benchmark, 0) + 1
    assert counts == {"amc23_25": 121, "aime": 90, "minerva": 272}
    with pytest.raises(TandemError, match="leave val_dataset unset"):
        train_cfg(train_inputs, tmp_path, validation="paper-test-sets", val_dataset="math500")
