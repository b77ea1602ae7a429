"""Files the tool wrote and reads back, spoiled on disk (cut short, binary, another shape): world caches and
shipped worlds (world/records.py), skill juniors' records, model and LoRA adapter folders (models.py,
adapters.py) and junior pool files (pool.py). Each is one ``TandemError`` line naming the file, never a
traceback from json, the codecs, safetensors or PEFT."""

from __future__ import annotations

import json
import shutil

import pytest

from tandem_rlvr.errors import TandemError

SPOILED = {  # name -> (bytes, what the error says)
    "cut short": (b'{"key": "810d4', "malformed JSON"),
    "binary": (b"\xff\xfe\x00\x01", "not UTF-8 text"),
    "a list": (b"[1, 2]", "expected a JSON object"),
    "keyless": (b'{"format": 3}', "lacks 'key'"),
}


def _one_line(e: pytest.ExceptionInfo, path) -> str:
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg, msg
    return msg


@pytest.mark.parametrize("spoil", SPOILED)
def test_a_spoiled_world_json_in_the_cache_is_named_with_the_rebuild(tmp_path, spoil):
    from tandem_rlvr.world.build import WorldConfig, load_world, world_root

    cfg = WorldConfig()
    root = world_root(cfg, tmp_path)
    root.mkdir(parents=True)
    (root / "world.json").write_bytes(SPOILED[spoil][0])
    with pytest.raises(TandemError) as e:
        load_world(cfg, build_if_missing=False, cache=tmp_path)
    msg = _one_line(e, root / "world.json")
    assert SPOILED[spoil][1] in msg and "tandem world build --force" in msg, msg


@pytest.mark.parametrize("spoil", SPOILED)
def test_a_spoiled_shipped_world_json_is_named_with_the_reinstall(tmp_path, spoil):
    from tandem_rlvr.world.shipped import shipped_world

    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "world.json").write_bytes(SPOILED[spoil][0])
    with pytest.raises(TandemError) as e:
        shipped_world("tiny", shipped=tmp_path)
    msg = _one_line(e, tmp_path / "tiny" / "world.json")
    assert SPOILED[spoil][1] in msg and "reinstall" in msg, msg


@pytest.mark.parametrize("record, says", [
    (b'{"level": 0.3, "accur', "malformed JSON"),
    (b"\x89PNG\r\n", "not UTF-8 text"),
    (b'{"level": 0.3, "t": 1, "model": "m"}', "lacks 'accuracy'"),
    (b'{"level": "high", "accuracy": 0.3, "t": 1, "model": "m"}', "level is 'high', not a finite number"),
])
def test_a_spoiled_skill_record_is_one_line_from_world_ls(tmp_path, monkeypatch, capsys, record, says):
    from tandem_rlvr.cli import main
    from tandem_rlvr.world.build import named_world
    from tandem_rlvr.world.skill import SKILL_JSON, SkillConfig, skill_root

    monkeypatch.setenv("TANDEM_CACHE", str(tmp_path))
    d = skill_root(named_world("tiny"), SkillConfig(), tmp_path) / "skill30"
    d.mkdir(parents=True)
    (d / SKILL_JSON).write_bytes(record)
    assert main(["world", "ls"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tandem: error:") and "\n" not in err and str(d / SKILL_JSON) in err and says in err, err


@pytest.fixture(scope="module")
def tiny_senior(tmp_path_factory):
    from tandem_rlvr.world.shipped import shipped_model

    d = tmp_path_factory.mktemp("senior") / "senior"
    shutil.copytree(shipped_model("tiny"), d)
    return d


@pytest.mark.parametrize("name, spoil", [("tokenizer.json", b'{"version": "1.0", "trunc'),
                                         ("tokenizer_config.json", b"\xff\xfe"),
                                         ("config.json", b'{"architectures": [')])
def test_a_spoiled_model_folder_file_is_named(tmp_path, tiny_senior, name, spoil):
    from tandem_rlvr.models import load_model, load_tokenizer

    d = tmp_path / "m"
    shutil.copytree(tiny_senior, d)
    (d / name).write_bytes(spoil)
    with pytest.raises(TandemError) as e:
        (load_tokenizer if name.startswith("tokenizer") else load_model)(str(d))
    assert str(d / name) in _one_line(e, d / name)


@pytest.fixture(scope="module")
def lora_save(tmp_path_factory, tiny_senior):
    """A LoRA save as ``tandem train --lora-r`` writes one: PEFT's adapter of the tiny senior and its tokenizer."""
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path_factory.mktemp("lora") / "final"
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_senior),
                           LoraConfig(r=2, target_modules=["q_proj"]))
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_senior).save_pretrained(out)
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == str(tiny_senior)
    return out


@pytest.mark.parametrize("name, keep, says", [("adapter_model.safetensors", 40, "corrupt or truncated weights"),
                                              ("adapter_config.json", 30, "malformed JSON")])
def test_a_cut_short_lora_adapter_file_is_named(tmp_path, lora_save, name, keep, says):
    from tandem_rlvr.models import load_model

    d = tmp_path / "final"
    shutil.copytree(lora_save, d)
    (d / name).write_bytes((d / name).read_bytes()[:keep])
    with pytest.raises(TandemError) as e:
        load_model(str(d))
    msg = _one_line(e, d if name.endswith(".safetensors") else d / name)
    assert says in msg, msg


def test_a_binary_junior_pool_file_is_named(tmp_path):
    from tandem_rlvr.pool import JuniorPool

    path = tmp_path / "pool.yaml"
    path.write_bytes(b"- tiny\n- \xc3\x28junior\n")
    with pytest.raises(TandemError) as e:
        JuniorPool.parse(str(path))
    assert "not UTF-8 text" in _one_line(e, path)
