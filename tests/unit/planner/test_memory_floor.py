"""The memory floor (``planner.memory.floor``) and the refusal of a run bigger than the machine, before any
model loads: numbers worked from the tiny world's config.json by hand."""

import json
from pathlib import Path

import pytest

from tandem_rlvr.config import load_train_config
from tandem_rlvr.errors import TandemError
from tandem_rlvr.models import resolve_model_path
from tandem_rlvr.planner.memory import floor


def _widths():
    c = json.loads((Path(resolve_model_path("tiny")) / "config.json").read_text())
    return c["num_hidden_layers"], c["num_key_value_heads"], c["head_dim"], c["hidden_size"]


def test_the_floor_is_the_rollout_batchs_kv_caches_of_senior_and_junior_on_one_cpu():
    layers, kv, head_dim, _ = _widths()
    # 8 prompts x 8 rollouts, a one-token prompt + 96 new tokens at the least, fp32 on CPU, self-paired
    cfg = load_train_config("tiny")
    per_model = 8 * 8 * (1 + 96) * layers * 2 * kv * head_dim * 4
    need, what = floor(cfg)["cpu"]
    assert need == 2 * per_model and "KV caches (64 rows x 97 positions" in what


def test_without_a_junior_in_the_rollout_the_floor_counts_the_seniors_cache_or_the_layer_inputs():
    layers, kv, head_dim, hidden = _widths()
    cfg = load_train_config("tiny", None, {"method": "grpo"})
    cache = 64 * 97 * layers * 2 * kv * head_dim * 4
    inputs = 64 * 2 * layers * hidden * 4  # one mini-batch of 8 prompts x 8 rollouts, 2 tokens a row at the least
    assert floor(cfg)["cpu"][0] == max(cache, inputs)


def test_with_small_decode_batches_the_update_sets_the_floor_and_shrinks_with_processes():
    layers, _, _, hidden = _widths()
    cfg = load_train_config("tiny", None, {"group_size": 1024, "rollout_batch_rows": 2})
    assert floor(cfg)["cpu"][0] == 8 * 1024 * 2 * layers * hidden * 4
    assert floor(cfg, num_processes=2)["cpu"][0] == 4 * 1024 * 2 * layers * hidden * 4


def test_a_server_engine_floors_only_the_update():
    layers, _, _, hidden = _widths()
    cfg = load_train_config("tiny", None, {"engine": "vllm-server", "server": "http://127.0.0.1:1"})
    need, what = floor(cfg)["cpu"]
    assert need == 64 * 2 * layers * hidden * 4 and "layer inputs" in what


def test_a_group_bigger_than_the_machine_is_one_line_before_anything_is_written(tmp_path, capsys):
    from tandem_rlvr.cli import main

    out = tmp_path / "run"
    assert main(["train", "--preset", "tiny", "--group-size", "100000000", "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("tandem: error: the rollout batch's KV caches (800000000 rows x 97 positions")
    assert "GiB on cpu, more than its" in err[0] and "group_size" in err[0]
    assert not out.exists()


def test_a_run_that_fits_is_not_refused(monkeypatch):
    import tandem_rlvr.planner.memory as memory

    cfg = load_train_config("tiny")
    memory.refuse_beyond_machine(cfg)
    monkeypatch.setattr(memory, "device_bytes", lambda d: floor(cfg)["cpu"][0] - 1)  # one byte short
    with pytest.raises(TandemError, match="more than its"):
        memory.refuse_beyond_machine(cfg)


def test_the_python_api_refuses_a_group_bigger_than_the_machine_before_building_the_run(tmp_path):
    import datasets

    from tandem_rlvr import TandemGRPOConfig, TandemGRPOTrainer

    rows = 1 << 26  # one prompt's group per step: 67M rollouts x 17 positions x 1 KiB a token x 2 models = 2,176 GiB
    args = TandemGRPOConfig(output_dir=str(tmp_path / "run"), use_cpu=True, bf16=False, num_generations=rows,
                            per_device_train_batch_size=rows, max_completion_length=16, max_steps=1, junior="tiny")
    train = datasets.Dataset.from_list([{"prompt": "1 + 1 =", "answer": "2"}] * 2)
    with pytest.raises(TandemError, match=rf"KV caches \({rows} rows x 17 positions at the least\) alone need 2,176"):
        TandemGRPOTrainer("tiny", reward_funcs=[lambda completions, **kw: [0.0] * len(completions)], args=args,
                          train_dataset=train)
    assert not (tmp_path / "run").exists()
