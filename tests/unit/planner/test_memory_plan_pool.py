"""``rl.memory_plan`` with a junior pool: each device's rollout, validation and KL-monitor transients
are those of the largest junior on that device (docs/pool.md, "Devices and memory": the juniors
decode one sub-batch each, in turn, so a device's peak is set by its largest junior alone, sized for
the whole batch, since a draw may give it every row).

Two derivations, neither from the plan's code: the junior KV cache by hand from each junior's config
(rows x tokens x layers x K and V x kv heads x head_dim x 2 bytes of bf16), and "the largest" as the
plan of the same run with that device's juniors one at a time, alone on it: the pool's transient of
each phase is the largest of those.
"""

import pytest
from transformers import Qwen3Config, Qwen3ForCausalLM

from tandem_rlvr.config import load_train_config
from tandem_rlvr.planner.memory import plan

from conftest import save_training_inputs

ROWS, SEQ = 2 * 4, 64 + 12  # prompts_per_step x group_size; max_prompt_tokens + max_new_tokens

# name -> (hidden, intermediate, layers, kv heads, head_dim): a deep, narrow junior with a large KV
# cache and a wide, shallow one with more parameters but a small KV cache
JUNIORS = {"tiny": (32, 64, 1, 1, 8), "small": (32, 64, 1, 2, 8), "big": (64, 128, 3, 2, 16), "mid": (32, 64, 2, 2, 8),
           "deep": (32, 64, 4, 4, 16), "wide": (256, 1024, 1, 1, 8)}


@pytest.fixture(scope="module")
def root(tmp_path_factory, tok):
    root = save_training_inputs(tmp_path_factory.mktemp("plan-pool"), tok)
    for name, (hidden, inter, layers, kv, head_dim) in JUNIORS.items():
        cfg = Qwen3Config(vocab_size=len(tok), hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                          num_attention_heads=4, num_key_value_heads=kv, head_dim=head_dim, tie_word_embeddings=False)
        Qwen3ForCausalLM(cfg).save_pretrained(root / name)
        tok.save_pretrained(root / name)
    return root


def _params(root, name) -> int:
    return sum(p.numel() for p in Qwen3ForCausalLM.from_pretrained(root / name).parameters())


def _plan(root, juniors: list[str], devices: list[str]):
    cfg = load_train_config(None, None, dict(
        senior=str(root / "senior"), junior=",".join(str(root / j) for j in juniors), junior_device=",".join(devices),
        senior_device="cuda:0", dataset=str(root / "data.jsonl"), dataset_split=None, val_size=4, template="plain",
        group_size=4, prompts_per_step=2, prompts_per_minibatch=2, max_prompt_tokens=64, max_new_tokens=12,
        eval_every=1, kl_every=1, output_dir=str(root / "unused")))
    return plan(cfg, gpu_gib=80.0)


def _junior_transient(p, device: str, phase: str) -> float:
    """Bytes of ``phase``'s junior items on ``device`` (the KL monitor's phase is all junior)."""
    return sum(it.nbytes for it in p.items if it.device == device and it.phase == phase
               and (phase == "kl-monitor" or "junior" in it.name))


def _kv_by_hand(name: str) -> int:
    _, _, layers, kv, head_dim = JUNIORS[name]
    return ROWS * SEQ * layers * 2 * kv * head_dim * 2


def test_each_device_sizes_its_junior_transients_by_its_largest_junior(root):
    # each device's largest comes second in pool order; the largest of all is not on cuda:2
    juniors, devices = ["small", "big", "tiny", "mid"], ["cuda:1", "cuda:1", "cuda:2", "cuda:2"]
    p = _plan(root, juniors, devices)
    assert _params(root, "big") > _params(root, "mid") > _params(root, "small") > _params(root, "tiny")
    for dev, largest in (("cuda:1", "big"), ("cuda:2", "mid")):
        kv = [it for it in p.items if it.device == dev and it.phase == "rollout" and "junior KV" in it.name]
        assert [it.nbytes for it in kv] == [_kv_by_hand(largest)], (dev, kv)  # one cache: sub-batches run in turn
        alone = _plan(root, [largest], [dev])
        for phase in ("rollout", "validation", "kl-monitor"):
            assert _junior_transient(p, dev, phase) == _junior_transient(alone, dev, phase) > 0, (dev, phase)
        weights = [it for it in p.items if it.device == dev and it.phase == "resident" and "junior" in it.name]
        assert len(weights) == 2  # every junior's weights are resident on its device


def test_a_junior_with_more_parameters_does_not_hide_a_larger_kv_cache(root):
    """The largest transient of each phase, whichever junior has it: ``wide`` has more parameters and the
    larger KL-monitor forward, ``deep`` the larger KV cache (4 layers x 4 kv heads x 16 against 1 x 1 x 8:
    32 times ``wide``'s)."""
    assert _params(root, "wide") > _params(root, "deep") and _kv_by_hand("deep") == 32 * _kv_by_hand("wide")
    p = _plan(root, ["wide", "deep"], ["cuda:1", "cuda:1"])
    alone = {j: _plan(root, [j], ["cuda:1"]) for j in ("wide", "deep")}
    for phase in ("rollout", "validation", "kl-monitor"):
        want = max(_junior_transient(a, "cuda:1", phase) for a in alone.values())
        assert _junior_transient(p, "cuda:1", phase) == want, phase
    kv = [it.nbytes for it in p.items if it.device == "cuda:1" and it.phase == "rollout" and "junior KV" in it.name]
    assert kv == [_kv_by_hand("deep")]
