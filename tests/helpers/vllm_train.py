"""The tiny training run on the in-process vLLM engine (``engine: vllm``) over the ``vllm_train_inputs`` fixture
(tests/conftest.py): its config, as a config or as the raw values a data-parallel entry reads."""

from tandem_rlvr.config import load_train_config


def vllm_cfg(inputs, tmp_path, tied=False, **kw):
    """The one-step run on vLLM over ``inputs`` (``tied``: the tied-head pair), under ``tmp_path/run``; ``kw``
    overrides any key."""
    return load_train_config(None, None, vllm_cfg_values(inputs, tmp_path, tied, **kw))


def vllm_cfg_values(inputs, tmp_path, tied=False, **kw):
    """The keys of ``vllm_cfg`` as a dict (what the data-parallel entry reads from JSON)."""
    dirs, data = inputs
    base = dict(senior=str(dirs["senior", tied]), junior=str(dirs["junior", tied]), dataset=str(data),
                dataset_split=None, val_size=4, template="plain", lr=5e-2, group_size=4, prompts_per_step=2,
                prompts_per_minibatch=2, max_prompt_tokens=64, max_new_tokens=12, temperature=1.0, max_steps=1,
                eval_every=0, save_every=1, kl_every=1, output_dir=str(tmp_path / "run"), engine="vllm",
                dtype="float32", vllm_kv_cache_gib=0.1)
    base.update(kw)
    return base
