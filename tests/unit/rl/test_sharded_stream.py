"""The weight stream of ``rl.weight_stream`` on one process (the sharded, multi-process runs are in
``tests/distributed/test_sharded_training.py``): buckets, the streamed HF save, the hf consumer, the choices."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from tandem_rlvr.config import load_train_config
from tandem_rlvr.errors import TandemError
from tandem_rlvr.rl.precision import RolloutModel
from tandem_rlvr.rl.sharding import from_launcher
from tandem_rlvr.rl.weight_stream import buckets, push, save_streamed

from conftest import make_model


@pytest.fixture(scope="module")
def model(tok):
    return make_model(len(tok), 0, hidden=32, layers=2)


def test_buckets_stay_under_their_size_and_hold_every_tensor_once_in_order(model):
    size = 20_000  # bytes of bf16; the 300 x 32 embedding (19,200 bytes) fits, two matrices do not
    got = list(buckets(model, torch.bfloat16, size))
    assert len(got) > 3
    for bucket in got:
        total = sum(t.numel() * 2 for _, t in bucket)
        assert total <= size or len(bucket) == 1
    names = [n for b in got for n, _ in b]
    params = dict(model.named_parameters())
    assert names == list(params)  # parameters in module order (this model has no persistent buffers)
    for name, t in (x for b in got for x in b):
        assert t.dtype == torch.bfloat16 and torch.equal(t, params[name].detach().to(torch.bfloat16))


def test_streamed_save_writes_shards_that_transformers_loads(model, tmp_path):
    save_streamed(model, tmp_path / "m", torch.bfloat16, bucket_bytes=20_000)
    index = json.loads((tmp_path / "m" / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert len(files) > 3 and all((tmp_path / "m" / f).is_file() for f in files)
    assert json.loads((tmp_path / "m" / "config.json").read_text())["dtype"] == "bfloat16"
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "m")
    assert next(loaded.parameters()).dtype == torch.bfloat16
    for name, p in model.named_parameters():
        assert torch.equal(dict(loaded.named_parameters())[name], p.detach().to(torch.bfloat16)), name


def test_push_to_the_main_process_alone_still_walks_the_whole_stream(model):
    taken = []
    stats = push(model, lambda ws: taken.extend(n for n, _ in ws), torch.bfloat16, 1 << 20, every_rank=False)
    assert taken == [n for n, _ in model.named_parameters()]  # one process: it is the main one
    assert stats["bytes"] == sum(p.numel() for p in model.parameters()) * 2

    early = []

    def first_only(ws):  # a consumer that stops early: push drains the rest (lockstep with other ranks)
        early.append(next(iter(ws))[0])

    stats = push(model, first_only, torch.bfloat16, 1 << 20)
    assert early == ["model.embed_tokens.weight"]
    assert stats["bytes"] == sum(p.numel() for p in model.parameters()) * 2


def test_rollout_copy_takes_the_stream_in_parts_and_refuses_a_foreign_tensor(model, tmp_path, tok):
    model.save_pretrained(tmp_path / "s")
    tok.save_pretrained(tmp_path / "s")
    rm = RolloutModel(str(tmp_path / "s"), torch.bfloat16)
    trained = make_model(len(tok), 5, hidden=32, layers=2)  # other weights, same shapes
    stats = push(trained, rm.load_weights, torch.bfloat16, 4096)  # an unsharded senior streams as a sharded one would
    assert stats["bytes"] == sum(p.numel() for p in trained.parameters()) * 2
    copy = rm.copy
    assert copy is not trained
    for name, p in trained.named_parameters():
        assert torch.equal(dict(copy.named_parameters())[name], p.detach().to(torch.bfloat16))
    with pytest.raises(TandemError, match="no tensor 'x.weight'"):
        rm.load_weights([("x.weight", torch.zeros(1))])


def test_an_accelerate_fsdp2_launch_selects_sharding_and_fsdp1_is_refused(monkeypatch):
    cfg = load_train_config(None, None, {"senior_device": "cuda:0"})  # offload needs an accelerator to offload from
    assert from_launcher(cfg).models.sharding == "none"
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "2")
    monkeypatch.setenv("FSDP_OFFLOAD_PARAMS", "true")
    got = from_launcher(cfg)
    assert (got.models.sharding, got.models.shard_offload) == ("fsdp2", True)
    monkeypatch.setenv("FSDP_VERSION", "1")
    with pytest.raises(TandemError, match="fsdp_version: 2"):
        from_launcher(cfg)


def test_an_accelerate_deepspeed_launch_selects_zero3_at_stage_3_only(monkeypatch, tmp_path):
    cfg = load_train_config(None, None, {"senior_device": "cuda:0"})  # offload needs an accelerator to offload from
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2")
    assert from_launcher(cfg).models.sharding == "none"  # ZeRO 1/2 keep whole weights on every process
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    assert (from_launcher(cfg).models.sharding, from_launcher(cfg).models.shard_offload) == ("zero3", False)
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "cpu")
    assert from_launcher(cfg).models.shard_offload
    monkeypatch.delenv("ACCELERATE_DEEPSPEED_ZERO_STAGE")  # a deepspeed_config_file names the stage itself
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", str(tmp_path / "ds.json"))
    assert from_launcher(cfg).models.sharding == "zero3"


def test_zero3_settings_keep_fp32_masters_reduce_in_fp32_and_gather_no_whole_state_dict():
    from tandem_rlvr.rl.zero3 import ds_settings

    cfg = load_train_config(None, None, {"sharding": "zero3", "shard_offload": True})
    ds = ds_settings(cfg, torch.bfloat16, torch.float32)
    zero = ds["zero_optimization"]
    assert (zero["stage"], ds["communication_data_type"]) == (3, "fp32")
    assert zero["stage3_gather_16bit_weights_on_model_save"] is False
    assert zero["offload_param"]["device"] == zero["offload_optimizer"]["device"] == "cpu"
    assert ds["bf16"]["enabled"] == "auto"  # the Trainer fills it from the run's precision
    with pytest.raises(TandemError, match="fp32 master partitions"):
        ds_settings(cfg, torch.bfloat16, torch.bfloat16)


def test_zero3_without_deepspeed_installed_is_a_one_line_error_naming_the_install(tmp_path, monkeypatch):
    from tandem_rlvr.rl import zero3
    from tandem_rlvr.rl.train import build_run

    monkeypatch.setattr(zero3, "available", lambda: False)
    monkeypatch.setenv("LOCAL_RANK", "0")
    cfg = load_train_config(None, None, {"sharding": "zero3", "output_dir": str(tmp_path / "run")})
    with pytest.raises(TandemError, match=r"not installed: pip install 'tandem-rlvr\[sharded\]'") as e:
        build_run(cfg)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "run").exists()


def test_sharding_settings_are_checked():
    with pytest.raises(TandemError, match="unknown sharding 'zero9'"):
        load_train_config(None, None, {"sharding": "zero9"})
    with pytest.raises(TandemError, match="shard_offload needs --sharding fsdp2 or zero3"):
        load_train_config(None, None, {"shard_offload": True})
    with pytest.raises(TandemError, match="sync_bucket_mb must be >= 1"):
        load_train_config(None, None, {"sync_bucket_mb": 0})


def test_a_sharded_run_outside_a_distributed_launch_is_refused(tmp_path, monkeypatch):
    from tandem_rlvr.rl.assemble import build_run

    cfg = load_train_config(None, None, {"sharding": "fsdp2", "output_dir": str(tmp_path / "run")})
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    with pytest.raises(TandemError, match="needs a distributed launch"):
        build_run(cfg)
    assert not (tmp_path / "run").exists()


def test_a_tied_head_is_pushed_under_both_names_gathered_once_and_saved_once(tok, tmp_path):
    """vLLM's reload needs the tied head by name (tests/unit/engines/test_engine_seam.py); the push repeats the
    embedding's gathered tensor for it, counting its bytes once; the save writes it once."""
    tied = make_model(len(tok), 0, hidden=32, layers=1)
    tied.config.tie_word_embeddings = True
    tied.lm_head.weight = tied.model.embed_tokens.weight
    got = []
    stats = push(tied, lambda ws: got.extend(ws), torch.bfloat16, 4096)
    names = [n for n, _ in got]
    i = names.index("model.embed_tokens.weight")
    assert names[i + 1] == "lm_head.weight" and got[i][1] is got[i + 1][1]
    assert names.count("lm_head.weight") == 1 and len(names) == len(list(tied.named_parameters())) + 1
    assert stats["bytes"] == sum(p.numel() for p in tied.parameters()) * 2  # parameters(): the tied one once
    assert stats["buckets"] == len(list(buckets(tied, torch.bfloat16, 4096)))
    save_streamed(tied, tmp_path / "t", torch.bfloat16, 1 << 20)  # safetensors refuses a tensor under two names
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "t")
    assert torch.equal(loaded.lm_head.weight, tied.model.embed_tokens.weight.detach().to(torch.bfloat16))


def test_the_layout_is_part_of_a_runs_identity_and_the_bucket_size_and_timeout_are_not(tmp_path):

    from tandem_rlvr.rl.run_identity import check_run_dir, stored_config

    cfg = load_train_config(None, None, {"output_dir": str(tmp_path)})
    new = ("sharding", "shard_offload", "sync_bucket_mb", "dist_timeout_s")
    old = {k: v for k, v in stored_config(cfg).items() if k not in new}
    (tmp_path / "config.json").write_text(json.dumps(old))  # a run recorded before sharding existed
    assert check_run_dir(cfg) == 0
    assert check_run_dir(cfg.with_keys(sync_bucket_mb=64, dist_timeout_s=60)) == 0
    with pytest.raises(TandemError, match="different sharding"):
        check_run_dir(cfg.with_keys(sharding="fsdp2"))
