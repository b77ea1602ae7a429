"""A resumed or re-read evaluation never reports results of inputs that changed since.

Through ``tandem eval`` as a user runs it: replace the weights in a ``--senior`` directory,
edit a benchmark's answers, reorder it, change ``--limit``, swap the junior of a handoff run,
or re-run into a directory made before fingerprints were recorded, and the command refuses
with one line naming what changed, leaving the run's files as they were. A finished run
re-run with the same inputs is a no-op. Legibility refuses samples whose problems or senior
changed. The resume check covers every setting that changes results (seed included), for
evaluation and training runs. Expected fingerprints are recomputed here with hashlib.
"""

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from tandem_rlvr.cli import main
from tandem_rlvr.config import EvalConfig, TrainConfig, config_fields, eval_keys
from tandem_rlvr.decoding.sampling import SamplingParams
from tandem_rlvr.errors import TandemError
from tandem_rlvr.eval.sample.sampler import evaluate

from helpers.evals import write_bench


def _eval(capsys, out, senior, bench, *extra, mode="solo"):
    capsys.readouterr()
    rc = main(["eval", mode, "--senior", str(senior), "--benchmarks", str(bench), "--n", "2", "--max-tokens", "4",
               "--out", str(out), *extra])
    return rc, capsys.readouterr()


def _snapshot(run):
    return {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != ".lock"}


def _refused(capsys, run, needle, *args, **kw):
    before = _snapshot(run)
    rc, res = _eval(capsys, run, *args, **kw)
    lines = [ln for ln in res.err.splitlines() if ln.startswith("tandem: error:")]
    assert rc != 0 and len(lines) == 1 and needle in lines[0], res.err
    assert "pass@1" not in res.out  # no figure printed
    assert _snapshot(run) == before  # nothing rewritten


def test_rerun_after_the_senior_weights_are_replaced_is_refused_not_stale(tmp_path, capsys, chat_models, tok):
    senior = tmp_path / "senior"
    shutil.copytree(chat_models["a"], senior)
    bench, run = write_bench(tmp_path / "b.jsonl"), tmp_path / "run"
    assert _eval(capsys, run, senior, bench)[0] == 0
    shutil.copy(chat_models["b"] / "model.safetensors", senior / "model.safetensors")
    _refused(capsys, run, "the senior model's files changed", senior, bench)


def test_rerun_after_a_benchmark_answer_is_edited_is_refused(tmp_path, capsys, chat_models):
    bench, run = write_bench(tmp_path / "b.jsonl"), tmp_path / "run"
    assert _eval(capsys, run, chat_models["a"], bench)[0] == 0
    write_bench(bench, answers=[0, 1, 999, 3])
    _refused(capsys, run, "benchmark b differs", chat_models["a"], bench)


def test_rerun_after_the_benchmark_is_reordered_under_the_same_ids_is_refused(tmp_path, capsys, chat_models):
    bench, run = write_bench(tmp_path / "b.jsonl"), tmp_path / "run"
    assert _eval(capsys, run, chat_models["a"], bench)[0] == 0
    rows = [json.loads(x) for x in bench.read_text().splitlines()]
    for r, other in zip(rows, rows[::-1], strict=False):  # ids stay 0..3, problems and answers reversed
        r["problem"], r["answer"] = other["problem"], other["answer"]
    bench.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _refused(capsys, run, "benchmark b differs", chat_models["a"], bench)


def test_rerun_with_another_limit_is_refused(tmp_path, capsys, chat_models):
    bench, run = write_bench(tmp_path / "b.jsonl"), tmp_path / "run"
    assert _eval(capsys, run, chat_models["a"], bench, "--limit", "2")[0] == 0
    _refused(capsys, run, "2 problems vs 4", chat_models["a"], bench)


def test_handoff_rerun_after_the_junior_weights_are_replaced_is_refused(tmp_path, capsys, chat_models):
    junior = tmp_path / "junior"
    shutil.copytree(chat_models["b"], junior)
    bench, run = write_bench(tmp_path / "b.jsonl"), tmp_path / "handoff"
    assert _eval(capsys, run, chat_models["a"], bench, "--junior", str(junior), mode="handoff")[0] == 0
    shutil.copy(chat_models["a"] / "model.safetensors", junior / "model.safetensors")
    _refused(capsys, run, "the junior model's files changed", chat_models["a"], bench, "--junior", str(junior),
             mode="handoff")


def test_a_run_made_before_fingerprints_is_refused_with_a_clear_line(tmp_path, capsys, chat_models):
    bench, run = write_bench(tmp_path / "b.jsonl"), tmp_path / "run"
    assert _eval(capsys, run, chat_models["a"], bench)[0] == 0
    cfg = json.loads((run / "config.json").read_text())
    del cfg["inputs"]  # what config.json looked like before this change
    (run / "config.json").write_text(json.dumps(cfg))
    _refused(capsys, run, "made before runs recorded input fingerprints", chat_models["a"], bench)


def test_a_finished_rerun_is_a_no_op_and_rows_carry_answer_and_problem_fingerprint(tmp_path, capsys, chat_models):
    bench, run = write_bench(tmp_path / "b.jsonl"), tmp_path / "run"
    assert _eval(capsys, run, chat_models["a"], bench)[0] == 0
    before = _snapshot(run)
    rc, res = _eval(capsys, run, chat_models["a"], bench)
    assert rc == 0 and "pass@1" in res.out and _snapshot(run)["samples.jsonl"] == before["samples.jsonl"]
    rows = [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines()]
    for r in rows:
        i = int(r["problem_id"])
        want = hashlib.sha256(json.dumps([f"Mia has {i} shells.", str(i)]).encode()).hexdigest()[:16]
        assert r["answer"] == str(i) and r["problem_fp"] == want
    # config, generation config, weights, tokenizer
    files = sorted(p for p in chat_models["a"].iterdir() if p.is_file())
    h = hashlib.sha256()
    for p in files:
        h.update(f"{p.name}\t{p.stat().st_size}\t{hashlib.sha256(p.read_bytes()).hexdigest()}\n".encode())
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["inputs"]["models"] == {"senior": h.hexdigest()[:16]}


def test_fingerprint_changes_when_one_byte_changes_even_with_size_and_mtime_kept(tmp_path, chat_models, monkeypatch):
    from tandem_rlvr.fingerprint import model_fingerprint

    monkeypatch.setenv("TANDEM_CACHE", str(tmp_path / "cache"))  # a cache entry exists for the old content
    d = tmp_path / "m"
    shutil.copytree(chat_models["a"], d)
    w = d / "model.safetensors"
    first = model_fingerprint(str(d))
    assert model_fingerprint(str(d)) == first  # cached, same answer
    st = w.stat()
    data = bytearray(w.read_bytes())
    data[len(data) // 2] ^= 1  # one bit in the middle of the weights
    w.write_bytes(bytes(data))
    os.utime(w, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same mtime
    assert model_fingerprint(str(d)) != first


def test_built_in_model_is_fingerprinted_by_its_files(tmp_path):
    from tandem_rlvr.models import resolve_model_path

    cfg = EvalConfig.from_keys(senior="tiny", benchmarks=("tiny",), limit=1, n=1,
                               sampling=SamplingParams(max_new_tokens=2))
    evaluate(cfg, tmp_path / "run", progress=False)
    d = resolve_model_path("tiny")
    h = hashlib.sha256()
    for p in sorted(x for x in Path(d).iterdir() if x.is_file()):
        h.update(f"{p.name}\t{p.stat().st_size}\t{hashlib.sha256(p.read_bytes()).hexdigest()}\n".encode())
    got = json.loads((tmp_path / "run" / "config.json").read_text())["inputs"]["models"]["senior"]
    assert got == h.hexdigest()[:16]


# --------------------------------------------------------------------------- legibility reads what was sampled
def test_legibility_refuses_samples_whose_problems_changed(tmp_path, capsys, chat_models):
    bench, run = write_bench(tmp_path / "b.jsonl"), tmp_path / "run"
    assert _eval(capsys, run, chat_models["a"], bench)[0] == 0
    write_bench(bench, answers=[0, 1, 999, 3])
    rc = main(["eval", "legibility", "--samples", str(run), "--junior", str(chat_models["b"]), "--out",
               str(tmp_path / "leg")])
    err = capsys.readouterr().err
    assert rc != 0 and "problem '2' of benchmark 'b' was sampled from another version" in err
    assert not (tmp_path / "leg" / "legibility.json").exists()


def test_legibility_refuses_a_senior_whose_weights_changed(tmp_path, capsys, chat_models):
    senior = tmp_path / "senior"
    shutil.copytree(chat_models["a"], senior)
    bench, run = write_bench(tmp_path / "b.jsonl"), tmp_path / "run"
    assert _eval(capsys, run, senior, bench)[0] == 0
    shutil.copy(chat_models["b"] / "model.safetensors", senior / "model.safetensors")
    rc = main(["eval", "legibility", "--samples", str(run), "--junior", str(chat_models["b"]), "--out",
               str(tmp_path / "leg")])
    err = capsys.readouterr().err
    assert rc != 0 and "is not the model that sampled this run" in err


# --------------------------------------------------------------------------- every setting that changes results
EVAL_EXEMPT = {"device", "junior_device", "batch_size", "vllm_settings",  # same samples (batch size: row seeds)
               "engine",  # recorded and compared; the vllm engine is not installed in the fast suite
               "mode", "split",  # checked below through schedule and problems (a local file has one split)
               "server",  # where and how to reach a server; the served checkpoint is fingerprinted (test_vllm_serve)
               "protocol"}  # needs a paragraph schedule: test_text_handoff.py checks its resume refusal


def test_eval_resume_check_covers_every_setting_that_changes_results(tmp_path, chat_models):
    """Change each EvalConfig field alone (seed included) and the resume is refused."""
    bench = write_bench(tmp_path / "b.jsonl")
    base = EvalConfig.from_keys(senior=str(chat_models["a"]), junior=str(chat_models["b"]), mode="handoff",
                                schedule="word",
                      benchmarks=(str(bench),), limit=3, n=2, sampling=SamplingParams(0.7, 0.8, 20, 3), seed=0,
                      template="plain", device="cpu", dtype="float32")
    run = tmp_path / "run"
    evaluate(base, run, progress=False)
    (tmp_path / "c").mkdir()
    other_bench = write_bench(tmp_path / "c" / "b.jsonl", answers=[0, 1, 5, 3])  # same name, problem 2's answer edited
    changes = {"senior": str(chat_models["b"]), "junior": str(chat_models["a"]), "schedule": "word-atomic",
               "benchmarks": (str(other_bench),), "limit": 2, "n": 3, "template": "chat", "instruction": "reason-step",
               "answer_mode": "final-boxes", "grader": "paper", "task": "answer-tag", "seed": 1, "p": 0.25, "K": 2,
               "dtype": "bfloat16",
               "sampling": [SamplingParams(1.0, 0.8, 20, 3), SamplingParams(0.7, 0.9, 20, 3),
                            SamplingParams(0.7, 0.8, 5, 3), SamplingParams(0.7, 0.8, 20, 4)]}
    fields = set(eval_keys())
    assert fields == set(changes) | EVAL_EXEMPT, fields ^ (set(changes) | EVAL_EXEMPT)
    for name, values in changes.items():
        for value in values if isinstance(values, list) else [values]:
            with pytest.raises(TandemError, match="existing run has a different|changed since|differs from"):
                evaluate(base.with_keys(**{name: value}), run, progress=False)
    evaluate(base.with_keys(batch_size=1), run, progress=False)  # exempt: the same samples, nothing to do


TRAIN_EXEMPT = {"output_dir", "server",  # a run's directory and its rollout server's URL may move
                "sync_bucket_mb", "dist_timeout_s"}  # how weights travel and how long a collective waits: not results


def _other_value(f, value):
    """Candidate values differing from ``value`` for field ``f`` of TrainConfig, most plausible first."""
    choices = {"method": ["grpo", "klreg"], "schedule": ["paragraph-roundrobin", "word-atomic"], "dtype": ["bfloat16"],
               "template": ["plain", "chat"], "instruction": ["reason-step"], "loss_normalizer": ["senior_tokens"],
               "report_to": ["tensorboard"], "engine": ["vllm"], "senior": ["tiny-junior"], "dataset": ["aime24"],
               "junior": ["tiny-junior"], "val_dataset": ["aime24"], "senior_device": ["cpu"], "junior_device": ["cpu"],
               "dataset_split": ["test"], "val_split": ["test"], "answer_mode": ["final-boxes"],
               "task": ["gsm8k"], "reward_terms": [["correct", "length:0.2"]],
               "reward": ["tandem_rlvr.rewards.math:score"],
               "judge_template": ["yes-no"], "judge_parser": ["yes-no"], "judge": ["http://127.0.0.1:9"],
               "best_by_junior": ["tiny"],  # a junior of the (self-paired) pool
               "plugins": [["json"]],  # any importable module
               "trl": [{"loss_type": "dr_grpo"}]}  # a GRPOConfig field no key sets
    if f.name in choices:
        return choices[f.name]
    if f.metadata.get("choices"):
        return [c for c in f.metadata["choices"] if c != value]
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1, value + 2, 2 * value]
    if isinstance(value, float):
        return [value / 2, value + 0.1, 1e-3]
    return [1, 0.5, "x"]


def test_training_resume_check_covers_every_setting_seed_included(tmp_path):
    """Change each TrainConfig field alone: a run directory holding the base config refuses it.
    A field that cannot change alone under the default method (beta: KL-Reg only) is changed
    from a KL-Reg base."""
    from tandem_rlvr.rl.run_identity import check_run_dir, stored_config

    def refused(base: TrainConfig, f) -> bool:
        (tmp_path / "run" / "config.json").write_text(json.dumps(stored_config(base)))
        assert check_run_dir(base) == 0  # the same config resumes
        for value in _other_value(f, base.to_dict()[f.name]):
            try:
                variant = base.with_keys(**{f.name: value})
            except (TandemError, ValueError, TypeError):
                continue
            if variant.to_dict() == base.to_dict():
                continue
            with pytest.raises(TandemError, match=f"different .*{f.name}"):
                check_run_dir(variant)
            return True
        return False

    (tmp_path / "run").mkdir()
    bases = [TrainConfig.from_keys(output_dir=str(tmp_path / "run")),
             TrainConfig.from_keys(method="klreg", output_dir=str(tmp_path / "run")),
             # the judge's own keys change alone only where a judge term uses them
             TrainConfig.from_keys(reward_terms=["correct", "judge"], judge="http://127.0.0.1:8",
                                   output_dir=str(tmp_path / "run")),
             # shard_offload needs a sharded run
             TrainConfig.from_keys(sharding="fsdp2", output_dir=str(tmp_path / "run")),
             TrainConfig.from_keys(lora_r=4, output_dir=str(tmp_path / "run")),  # save_merged needs a LoRA run
             # max_staleness needs an engine that decodes elsewhere than training (hf: a rollout device of its own)
             TrainConfig.from_keys(rollout_device="cuda:1", output_dir=str(tmp_path / "run"))]
    untested = [f.name for f in config_fields()
                if f.name not in TRAIN_EXEMPT and not any(refused(b, f) for b in bases)]
    assert untested == []
