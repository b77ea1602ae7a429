"""The Python API (``tandem_rlvr.__all__``): declared, importable, documented; ``TandemGRPOConfig``'s
translation to the run's settings; ``TandemGRPOTrainer`` on a user's Dataset and reward callable as the run
of ``tandem train``; ``tandem_rollout`` inside a plain TRL ``GRPOTrainer``; ``evaluate`` for notebooks.

The runs are the tiny world's, one or two updates of 4 prompts x 4 rollouts of 16 tokens (seconds on CPU).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

import tandem_rlvr
from tandem_rlvr.errors import TandemError

ROOT = Path(__file__).resolve().parents[3]


def _rows(split: str, n: int) -> list[dict]:
    from tandem_rlvr.data.benchmarks import load_benchmark

    return [{"prompt": p.problem + "\n\n", "answer": p.answer} for p in load_benchmark("tiny", split=split, limit=n)]


CALLS: list[dict] = []  # what the reward function was given, call by call


def boxed_is_answer(prompts, completions, answer, **kw):
    """The user's reward: 1 when the last \\boxed{} equals the answer column (TRL's convention)."""
    from tandem_rlvr.rewards.math import score

    CALLS.append({"n": len(completions), "answer": list(answer), "columns": sorted(kw)})
    return [score(c, a) for c, a in zip(completions, answer, strict=True)]


def _args(out, **kw):
    from tandem_rlvr import TandemGRPOConfig

    base = dict(output_dir=str(out), use_cpu=True, bf16=False, learning_rate=1e-4, num_generations=4,
                per_device_train_batch_size=16, max_completion_length=16, max_steps=2, eval_every=2, save_steps=2,
                temperature=1.0, junior="tiny-junior", report_to=["tensorboard"], log_completions=True,
                num_completions_to_print=3)
    return TandemGRPOConfig(**{**base, **kw})


def test_public_names_are_declared_importable_and_documented():
    readme = (ROOT / "README.md").read_text()
    assert set(tandem_rlvr.__all__) >= {"TandemGRPOConfig", "TandemGRPOTrainer", "tandem_rollout", "evaluate",
                                       "register_task", "register_benchmark", "register_reward_term",
                                       "register_schedule", "register_measure"}
    for name in tandem_rlvr.__all__:
        if name == "__version__":
            continue
        obj = getattr(tandem_rlvr, name)
        assert (obj.__doc__ or "").strip(), f"{name} has no docstring"
        assert f"`{name}`" in readme or f"{name}(" in readme, f"README does not document {name}"
    with pytest.raises(AttributeError):
        tandem_rlvr.nosuch  # noqa: B018


def test_trl_batch_fields_become_prompts_per_update_and_per_rollout_batch_as_worked_by_hand(tmp_path):
    from tandem_rlvr.rl.grpo_config import train_keys

    # 16 rows per forward x 2 accumulated = 32 rows per update on 1 process = 4 prompts of G = 8;
    # steps_per_generation 4 = 2 updates per rollout batch -> 8 prompts per rollout batch
    a = _args(tmp_path, num_generations=8, per_device_train_batch_size=16, gradient_accumulation_steps=2,
              steps_per_generation=4, report_to=[])
    k = train_keys(a, 1)
    assert (k["prompts_per_minibatch"], k["prompts_per_step"], k["micro_batch_rows"]) == (4, 8, 16)
    assert train_keys(a, 2)["prompts_per_minibatch"] == 8  # 2 processes: twice the rows per update


@pytest.mark.parametrize("preset", ["tiny", "smol", "qwen3-4b-deepscaler"])
def test_a_preset_s_settings_survive_the_trip_through_tandem_grpo_config(preset, tmp_path):
    """tandem train builds a TandemGRPOConfig from its TrainConfig; TandemGRPOTrainer reads one back: the same run."""
    from tandem_rlvr.config import TrainConfig, load_train_config
    from tandem_rlvr.rl.grpo_config import from_train_config, train_keys

    cfg = load_train_config(preset, overrides={"output_dir": str(tmp_path), "dtype": "float32",
                                               "trl": {"lr_scheduler_type": "cosine", "warmup_steps": 0.1}})
    args = from_train_config(cfg, 1, True)
    assert (args.lr_scheduler_type, args.warmup_steps, args.loss_type) == ("cosine", 0.1, "dapo")
    back = TrainConfig.from_keys(**{**cfg.to_dict(), **train_keys(args, 1)})
    want = cfg.to_dict()  # the same run, its counts in optimiser updates (TRL's unit)
    upb = cfg.loop.updates_per_batch if cfg.loop.step_unit == "rollout" else 1
    want.update(step_unit="update", max_steps=cfg.loop.max_steps * upb if cfg.loop.max_steps > 0 else -1,
                save_every=cfg.loop.save_every * upb, eval_every=cfg.loop.eval_every * upb)
    assert back.to_dict() == want


def test_fixed_fields_and_bad_trl_fields_are_one_line_errors(tmp_path):
    from tandem_rlvr.config import TrainConfig
    from tandem_rlvr.rl.grpo_config import check_trl_overrides

    with pytest.raises(TandemError, match="num_iterations=2 is fixed to 1"):
        _args(tmp_path, num_iterations=2)
    with pytest.raises(TandemError, match="use_vllm=True is fixed"):
        _args(tmp_path, use_vllm=True)
    for bad, says in (({"nosuch": 1}, "not a GRPOConfig field"), ({"learning_rate": 1}, "set by the key 'lr'"),
                      ({"num_iterations": 2}, "fixed to 1")):
        with pytest.raises(TandemError, match=says):
            check_trl_overrides(bad)
    with pytest.raises(TandemError, match="trl must be a mapping"):
        TrainConfig.from_keys(trl=["loss_type"])


def test_tools_environments_and_a_rollout_func_are_refused_before_any_model_loads(tmp_path):
    from tandem_rlvr import TandemGRPOTrainer

    for kw, says in (({"tools": [len]}, "tools is not supported"),
                     ({"environment_factory": object}, "environment_factory is not supported"),
                     ({"rollout_func": len}, "rollout_func is not supported"),
                     ({"bogus": 1}, "unexpected argument 'bogus'")):
        with pytest.raises(TandemError, match=says):
            TandemGRPOTrainer("tiny", reward_funcs=[boxed_is_answer], args=None, **kw)
    with pytest.raises(TandemError, match="must be a TandemGRPOConfig"):
        TandemGRPOTrainer("tiny", reward_funcs=[boxed_is_answer], args=object())


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 2-update tandem run on 8 training rows and 4 validation rows, through the public trainer."""
    import datasets

    from tandem_rlvr import TandemGRPOTrainer

    out = tmp_path_factory.mktemp("api") / "run"
    CALLS.clear()
    train, val = datasets.Dataset.from_list(_rows("train", 8)), datasets.Dataset.from_list(_rows("val", 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = TandemGRPOTrainer("tiny", reward_funcs=[boxed_is_answer], args=_args(out), train_dataset=train,
                                    eval_dataset=val)
        summary = trainer.train()
    return {"out": out, "summary": summary, "trainer": trainer, "calls": list(CALLS), "train": train, "val": val}


def test_the_public_trainer_runs_tandem_train_s_run_on_a_dataset_and_a_reward_callable(trained):
    out, summary = trained["out"], trained["summary"]
    assert summary["steps"] == 2 and summary["method"] == "tandem"
    assert all((out / d).is_dir() for d in ("final", "best", "checkpoint-2"))
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["reward_funcs"] == ["test_api:boxed_is_answer"] and cfg["junior"] == "tiny-junior"
    assert cfg["dataset"].startswith("rows:") and cfg["val_dataset"].startswith("rows:")
    assert (cfg["prompts_per_step"], cfg["group_size"], cfg["max_new_tokens"]) == (4, 4, 16)
    for card in (out / "final" / "README.md", out / "README.md"):  # the user's reward, not the terms'
        assert "reward: your reward functions: 1 x `test_api:boxed_is_answer`" in card.read_text(), card
    log = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "val/accuracy" in r] == [0, 2]  # step 0, then every eval_every=2 updates
    assert [r["step"] for r in log if "loss" in r] == [1, 2]
    assert all(0 < r["senior/token_share"] < 1 for r in log if "loss" in r)  # co-written rollouts
    # the reward got TRL's columns: 16 training rows a step (4 prompts x 4) and 4 validation rows per validation
    sizes = sorted(c["n"] for c in trained["calls"])
    assert sizes == [4, 4, 16, 16]
    gold = {r["answer"] for r in _rows("train", 8)}
    assert all(set(c["answer"]) <= gold for c in trained["calls"] if c["n"] == 16)
    assert all("problem_id" in c["columns"] for c in trained["calls"] if c["n"] == 16)


def test_the_trainer_s_arguments_are_the_users_on_one_path(trained):
    """TandemGRPOTrainer trains with the TandemGRPOConfig that tandem train would build from the recorded settings,
    which holds every value the user set."""
    from tandem_rlvr.rl.grpo_config import TandemGRPOConfig

    built, mine = trained["trainer"].args, _args(trained["out"])
    for name in ("learning_rate", "num_generations", "max_completion_length", "temperature", "max_steps", "save_steps",
                 "junior", "eval_every", "lr_scheduler_type", "per_device_train_batch_size", "seed", "beta",
                 "report_to"):
        assert getattr(built, name) == getattr(mine, name), name
    assert isinstance(built, TandemGRPOConfig)


def test_validation_figures_reach_tensorboard(trained):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = list((trained["out"] / "runs").rglob("events.out.tfevents.*"))  # transformers' default logging dir
    assert files
    got = {}
    for f in files:
        acc = EventAccumulator(str(f))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            got.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    log = [json.loads(x) for x in (trained["out"] / "log.jsonl").read_text().splitlines()]
    val = [(r["step"], r["val/accuracy"]) for r in log if "val/accuracy" in r]
    # transformers' TensorBoard callback files every record under train/ (but eval_* keys)
    tb = sorted(got["train/val/accuracy"])  # log.jsonl's figures, at their steps (TensorBoard keeps float32)
    assert [s for s, _ in tb] == [s for s, _ in sorted(val)]
    assert [v for _, v in tb] == pytest.approx([v for _, v in sorted(val)])
    assert {"train/val/best", "train/val/decline", "train/val/best_step"} <= set(got)
    assert any(t.endswith("senior/token_share") for t in got)


def test_each_rollout_batch_s_first_rows_show_who_wrote_which_words(trained):
    """log_completions: completions.md and TensorBoard's text tab hold 3 rows per update, junior words marked."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    text = (trained["out"] / "completions.md").read_text()
    assert text.count("## update ") == 2 and text.count("### row ") == 6
    assert text.count("[[") == text.count("]]") > 0  # junior runs, balanced
    rows = text.split("### row ")[1:]
    for row in rows:  # a share strictly between 0 and 1 has junior words; 1.0 has none
        share = float(row.split("senior share ")[1].split(")")[0])
        assert ("[[" in row) == (share < 1.0)
    texts = []
    for f in (trained["out"] / "runs").rglob("events.out.tfevents.*"):
        acc = EventAccumulator(str(f), size_guidance={"tensors": 0})
        acc.Reload()
        tags = [tag for tag in acc.Tags()["tensors"] if tag.startswith("completions/authored")]
        texts += [e for tag in tags for e in acc.Tensors(tag)]
    assert sorted(e.step for e in texts) == [0, 1]  # one table per rollout batch, at the update that drew it
    table = texts[0].tensor_proto.string_val[0].decode()
    assert table.count("\n| ") >= 3 or table.count("\n|") >= 3


def test_a_finished_run_is_a_no_op_and_other_rows_are_refused(trained, capsys):
    import datasets

    from tandem_rlvr import TandemGRPOTrainer

    out = trained["out"]
    before = (out / "log.jsonl").read_text()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = TandemGRPOTrainer("tiny", reward_funcs=[boxed_is_answer], args=_args(out),
                                  train_dataset=trained["train"], eval_dataset=trained["val"]).train()
        assert again["steps"] == 2 and (out / "log.jsonl").read_text() == before
        other = datasets.Dataset.from_list(_rows("train", 9)[1:])
        with pytest.raises(TandemError, match="dataset"):
            TandemGRPOTrainer("tiny", reward_funcs=[boxed_is_answer], args=_args(out), train_dataset=other,
                              eval_dataset=trained["val"])


def test_tandem_rollout_makes_a_plain_grpo_trainer_train_on_senior_tokens_only(tmp_path, monkeypatch):
    import datasets
    from trl import GRPOConfig, GRPOTrainer

    from tandem_rlvr import tandem_rollout
    from tandem_rlvr.models import load_model, load_tokenizer

    seen = []  # (loss mask, completion length) of every row that reached the loss
    original = GRPOTrainer._compute_loss

    def spy(self, model, inputs):
        for m, c in zip((inputs["completion_mask"] * inputs["tool_mask"]).tolist(), inputs["completion_mask"].tolist(),
                        strict=True):
            seen.append(tuple(m[: int(sum(c))]))
        return original(self, model, inputs)

    monkeypatch.setattr(GRPOTrainer, "_compute_loss", spy)
    rollout = tandem_rollout("tiny-junior", schedule="word", p=0.5, K=4)
    returned = []

    def recorded(prompts, trainer):
        out = rollout(prompts, trainer)
        returned.append(out)
        return out

    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, num_generations=4, max_completion_length=16,
                      per_device_train_batch_size=8, max_steps=1, report_to=[], learning_rate=1e-4, temperature=1.0,
                      logging_steps=1, save_strategy="no")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = GRPOTrainer(model=load_model("tiny", "cpu", trainable=True), reward_funcs=[boxed_is_answer],
                              args=args, train_dataset=datasets.Dataset.from_list(_rows("train", 4)),
                              processing_class=load_tokenizer("tiny"), rollout_func=recorded)
        trainer.train()
    env = [tuple(m) for out in returned for m in out["env_mask"]]
    assert any(0 in m for m in env) and any(1 in m for m in env)  # both models wrote
    # TRL's loss mask is the senior mask on each row's tokens: the junior's tokens never reach the loss
    assert sorted(seen) == sorted(env)
    for out in returned:
        assert [len(m) for m in out["env_mask"]] == [len(c) for c in out["completion_ids"]]
    with pytest.raises(TandemError, match="unknown schedule"):
        tandem_rollout("tiny-junior", schedule="nosuch")


def test_evaluate_returns_the_figures_tandem_eval_writes(tmp_path):
    from tandem_rlvr import evaluate

    rows = [{"problem": r["prompt"].strip(), "answer": r["answer"]} for r in _rows("val", 3)]
    m = evaluate("tiny", problems=rows, n=2, out=str(tmp_path / "e"), template="plain", batch_size=8)
    assert m == json.loads((tmp_path / "e" / "metrics.json").read_text())
    samples = [json.loads(x) for x in (tmp_path / "e" / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 6
    # pass@1 by hand: per problem the share of its 2 samples that are correct, averaged over the 3 problems
    by = {}
    for s in samples:
        by.setdefault(s["problem_id"], []).append(float(s["correct"]))
    want = sum(sum(v) / len(v) for v in by.values()) / len(by)
    assert m["problems"]["pass@1"]["mean"] == pytest.approx(want)


def test_model_objects_chat_prompts_and_a_lora_config_train_as_given(tmp_path):
    """Objects instead of ids: the senior trains through PEFT adapters of the LoraConfig's rank, the junior object
    stays bit for bit, chat prompts are rendered with the tokenizer's template and the reward gets TRL's
    conversational completions (lists of one assistant message)."""
    import datasets
    import torch
    from peft import LoraConfig

    from tandem_rlvr import TandemGRPOTrainer
    from tandem_rlvr.models import load_model, load_tokenizer

    tok = load_tokenizer("tiny")
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}\n\n{% endfor %}"  # the tiny world's plain format
    senior, junior = load_model("tiny", "cpu", torch.float32, trainable=True), load_model("tiny-junior", "cpu")
    before = {n: p.clone() for n, p in junior.named_parameters()}
    seen = []

    def chat_reward(prompts, completions, answer, **kw):
        seen.append((prompts[0], completions[0]))
        return [float(a in c[0]["content"]) for c, a in zip(completions, answer, strict=True)]

    rows = [{"prompt": [{"role": "user", "content": r["prompt"].strip()}],
             "answer": r["answer"]} for r in _rows("train", 4)]
    args = _args(tmp_path / "run", max_steps=1, save_steps=1, eval_every=0, report_to=[], log_completions=False,
                 junior=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = TandemGRPOTrainer(senior, junior=junior, reward_funcs=chat_reward, args=args, processing_class=tok,
                                    train_dataset=datasets.Dataset.from_list(rows),
                                    peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
        trainer.train()
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (cfg["lora_r"], cfg["lora_alpha"], cfg["lora_targets"]) == (4, 8.0, ["q_proj", "v_proj"])
    assert (tmp_path / "run" / "final" / "adapter_config.json").is_file()
    assert all(torch.equal(p, before[n]) for n, p in junior.named_parameters())
    prompt, completion = seen[0]
    assert prompt[0]["role"] == "user" and completion[0]["role"] == "assistant"
    log = [json.loads(x) for x in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert 0 < log[-1]["senior/token_share"] < 1


def test_a_run_killed_after_its_first_checkpoint_resumes_there_when_the_script_runs_again(tmp_path):
    """The state a kill after checkpoint-1 leaves (no checkpoint-2, final/ or summary.json): running the same
    script again resumes at update 1 and the log holds each update once."""
    import shutil

    import datasets

    from tandem_rlvr import TandemGRPOTrainer

    run = tmp_path / "run"
    train = datasets.Dataset.from_list(_rows("train", 8))

    def script():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return TandemGRPOTrainer("tiny", reward_funcs=[boxed_is_answer], train_dataset=train,
                                     args=_args(run, save_steps=1, eval_every=0, report_to=[], log_completions=False))

    script().train()
    whole = [json.loads(x) for x in (run / "log.jsonl").read_text().splitlines()]
    for name in ("checkpoint-2", "final"):
        shutil.rmtree(run / name)
    (run / "summary.json").unlink()
    log = [r for r in whole if r["step"] <= 1]
    (run / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log + [{"step": 2, "torn": 1}]))
    summary = script().train()
    assert summary["steps"] == 2 and (run / "final").is_dir()
    again = [json.loads(x) for x in (run / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in again if "loss" in r] == [1, 2] and not any("torn" in r for r in again)
    first = next(r for r in whole if r["step"] == 1 and "loss" in r)
    assert next(r for r in again if r["step"] == 1 and "loss" in r)["reward/mean"] == first["reward/mean"]
