"""``config.load`` and ``config.fields``: an integer setting refuses a non-integer value in one line,
from a flag, a YAML file, the Python API and the environment; a float setting takes an integer.

Why: 2.5 rollouts per group or 1.5 steps mean nothing, and a silent ``int(2.5)`` would run another
experiment than the one written; a float written as ``1`` (``lr: 1``, ``--temperature 1``) is that float.
Every integer and every float field of ``TrainConfig`` is covered (the lists are checked against the
fields, so a new setting joins them); ``$TANDEM_THREADS`` is the environment's integer setting.
"""

import pytest

from tandem_rlvr.cli import build_parser, main
from tandem_rlvr.config import TrainConfig, config_fields, load_train_config
from tandem_rlvr.config.fields import kind
from tandem_rlvr.errors import TandemError

INTS = [f.name for f in config_fields() if kind(f) == "int"]
FLOATS = [f.name for f in config_fields() if kind(f) == "float"]
# an integer each float setting takes alone (in its range, with the other settings at their defaults)
WHOLE = {"lora_alpha": 16, "lora_dropout": 0, "p": 1, "temperature": 1, "top_p": 1, "vllm_gpu_memory_utilization": 1,
         "vllm_kv_cache_gib": 2, "lr": 1, "clip": 1, "beta": 0, "junior_token_weight": 1, "junior_imitation": 0,
         "weight_decay": 0, "dual_clip": 3, "kl_clamp": 10, "judge_timeout": 60, "epochs": 3, "decline_drop": 1,
         "importance_clip": 2}
WITH = {"lora_alpha": {"lora_r": 4}}  # settings a float needs beside it


def _flag(name: str) -> str:
    return f"--{name.replace('_', '-')}"


def _one_line(text: str, *needles: str) -> None:
    text = text.strip()
    assert len(text.splitlines()) == 1 and all(n in text for n in needles), text


def test_the_lists_cover_every_numeric_setting():
    assert len(INTS) > 20 and {"group_size", "max_steps", "eval_n", "seed", "K", "lora_r"} <= set(INTS)
    assert set(WHOLE) == set(FLOATS)


@pytest.mark.parametrize("value", ["2.5", "4.0", "1e3", "x"])
def test_every_integer_flag_of_train_refuses_a_non_integer(capsys, value):
    parser = build_parser()
    for name in INTS:
        with pytest.raises(SystemExit) as e:
            parser.parse_args(["train", _flag(name), value])
        assert e.value.code == 2
        _one_line(capsys.readouterr().err, f"argument {_flag(name)}:", repr(value))


@pytest.mark.parametrize("value", [2.5, 0.5, "3", True])
def test_every_integer_key_of_a_yaml_file_refuses_a_non_integer(tmp_path, value):
    f = tmp_path / "c.yaml"
    for name in INTS:
        f.write_text(f"{name}: {value!r}\n".replace("True", "true"))
        with pytest.raises(TandemError) as e:
            load_train_config(file=str(f))
        _one_line(str(e.value), repr(name))


def test_every_integer_field_refuses_a_non_integer_from_python():
    for name in INTS:
        with pytest.raises(TandemError) as e:
            TrainConfig.from_keys(**{name: 2.5})
        _one_line(str(e.value), name, "integer", "2.5")


def test_a_non_integer_is_one_line_from_the_command_line(capsys, tmp_path, monkeypatch):
    (tmp_path / "c.yaml").write_text("group_size: 2.5\n")
    for argv, needle in ((["train", "--dry-run", "--group-size", "2.5"], "--group-size"),
                         (["train", "--dry-run", "--config", str(tmp_path / "c.yaml")], "'group_size'"),
                         (["eval", "solo", "--n", "2.5"], "--n"),
                         (["bench", "decode", "--threads", "1.5"], "--threads")):
        assert main(argv) == 2, argv
        _one_line(capsys.readouterr().err, "error:", needle, "2.5" if "--threads" not in argv else "1.5")
    for value in ("2.5", "1.0", "1e0"):
        monkeypatch.setenv("TANDEM_THREADS", value)
        assert main(["train", "--dry-run"]) == 2
        _one_line(capsys.readouterr().err, "tandem: error: $TANDEM_THREADS", "integer", repr(value))


def test_every_float_setting_takes_an_integer_from_a_flag_and_a_yaml_file(tmp_path):
    parser = build_parser()
    f = tmp_path / "c.yaml"
    for name, whole in WHOLE.items():
        args = vars(parser.parse_args(["train", _flag(name), str(whole)]))
        assert args[name] == whole and isinstance(args[name], float), name
        extra = WITH.get(name, {})
        f.write_text(f"{name}: {whole}\n" + "".join(f"{k}: {v}\n" for k, v in extra.items()))  # YAML reads an int
        for cfg in (load_train_config(file=str(f)), load_train_config(overrides={name: args[name], **extra})):
            value = cfg.to_dict()[name]
            assert value == whole and isinstance(value, float), (name, value)
