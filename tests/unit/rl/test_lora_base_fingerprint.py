"""A LoRA save records its base model's fingerprint (``adapters.BASE_RECORD``), and loading or evaluating
the save refuses a base whose files were replaced, with one line naming the base."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

pytest.importorskip("peft")

from tandem_rlvr.adapters import BASE_RECORD  # noqa: E402
from tandem_rlvr.cli import main  # noqa: E402
from tandem_rlvr.errors import TandemError  # noqa: E402
from tandem_rlvr.models import load_model  # noqa: E402
from tandem_rlvr.rl.lora import save_lora  # noqa: E402

from conftest import make_model  # noqa: E402


@pytest.fixture
def saved(tmp_path, model_dir, tok):
    """(base directory, LoRA save of an adapter over it) written by ``save_lora``."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = tmp_path / "base"
    shutil.copytree(model_dir, base)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(str(base)),
                           LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    save_lora(model, tmp_path / "save", torch.float32)
    tok.save_pretrained(tmp_path / "save")  # as a run's saves hold it
    return base, tmp_path / "save"


def test_a_lora_save_records_the_sha256_of_its_base_files(saved):
    import hashlib

    base, save = saved
    rec = json.loads((save / BASE_RECORD).read_text())
    assert rec["base"] == str(base)
    # fingerprint.py's rule by hand: sorted top-level files (README.md and dot-files skipped), one line each
    lines = "".join(f"{p.name}\t{p.stat().st_size}\t{hashlib.sha256(p.read_bytes()).hexdigest()}\n"
                    for p in sorted(base.iterdir()) if p.is_file() and not p.name.endswith(".md"))
    assert rec["fingerprint"] == hashlib.sha256(lines.encode()).hexdigest()[:16]


def test_a_lora_save_over_a_replaced_base_is_refused_naming_the_base(saved, tok, capsys):
    base, save = saved
    load_model(str(save))  # the base it was saved over: loads
    make_model(len(tok), 7, hidden=32, layers=1).save_pretrained(base)  # same name, other weights
    with pytest.raises(TandemError, match=f"the base model {base} of the LoRA adapter {save} has changed"):
        load_model(str(save))
    rc = main(["eval", "solo", "--senior", str(save), "--benchmarks", "tiny", "--limit", "1", "--n", "1",
               "--max-tokens", "4", "--template", "plain", "--out", str(base.parent / "ev")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and err[-1].startswith("tandem: error: the base model ") and str(base) in err[-1]
    assert not (base.parent / "ev" / "samples.jsonl").exists()


def test_a_lora_save_without_the_record_loads_unchecked(saved, tok):
    base, save = saved
    (save / BASE_RECORD).unlink()  # PEFT's own save (or an older one of ours) has no record
    make_model(len(tok), 7, hidden=32, layers=1).save_pretrained(base)
    load_model(str(save))
