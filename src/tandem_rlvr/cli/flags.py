"""Flags shared by ``tandem`` subcommands (the modules of ``cli/``) and the objects
built from them: models, sampling, schedule, engine, template, answer mode."""

from __future__ import annotations

import argparse

from ..errors import TandemError, check_number, number_rule


def number(kind=int, lo=None, hi=None, *, lo_open: bool = False, optional: bool = False):
    """argparse type of a numeric flag: ``kind`` (int or float) parsed from the text, then
    ``errors.check_number``'s rule (finite, in range), so NaN, inf, 0 and negative values fail as
    a one-line usage error naming the flag, before any work. ``optional``: "none" means None."""
    integer = kind is int

    def parse(text: str):
        if optional and text.strip().lower() in ("none", "null"):
            return None
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {number_rule(lo, hi, lo_open=lo_open, integer=integer)}, "
                                             f"got {text!r}") from None
        try:
            return check_number(value, "value", lo, hi, lo_open=lo_open, integer=integer)
        except TandemError as e:
            raise argparse.ArgumentTypeError(str(e).removeprefix("value ")) from None

    parse.__name__ = kind.__name__
    return parse


COUNT = number(int, 1)  # a positive count: --n, --batch-size, --limit, ...
FRACTION = number(float, 0, 1)  # a probability in [0, 1]


def seed_type(text: str) -> int:
    """argparse type of every --seed: an integer in [0, config.SEED_MAX]."""
    from ..config import check_seed

    try:
        return check_seed(int(text))
    except (ValueError, TandemError) as e:
        raise argparse.ArgumentTypeError(
            str(e) if isinstance(e, TandemError) else f"expected an integer, got {text!r}") from None


def model_flags(p: argparse.ArgumentParser, junior: bool = True) -> None:
    g = p.add_argument_group("models")
    g.add_argument("--senior", default="tiny", help="senior: directory, .gguf file, hub id, or a built-in name "
                   "(tiny = the tiny world's base model). Default: tiny")
    if junior:
        g.add_argument("--junior", default=None, help="junior (frozen), same tokenizer as the senior; "
                       "default: the senior's checkpoint (self-pairing); tiny-junior = the tiny world's weaker junior")
        g.add_argument("--junior-device", default=None, help="device of the junior (default: the senior's)")
    g.add_argument("--device", default="auto", help="device of the senior: auto, cpu, cuda:0, ... (default: auto)")
    g.add_argument("--dtype", default="auto", help="float32, bfloat16, float16 or auto (bf16 on CUDA, else fp32)")


def sampling_flags(p: argparse.ArgumentParser, temperature=1.0, top_p=1.0, top_k=0, max_tokens=256) -> None:
    g = p.add_argument_group("sampling")
    g.add_argument("--temperature", type=number(float, 0), default=temperature,
                   help=f"0 = greedy (default {temperature})")
    g.add_argument("--top-p", type=number(float, 0, 1, lo_open=True), default=top_p,
                   help=f"nucleus mass (default {top_p})")
    g.add_argument("--top-k", type=number(int, 0), default=top_k, help=f"0 = off (default {top_k})")
    g.add_argument("--max-tokens", type=COUNT, default=max_tokens,
                   help=f"new tokens per response (default {max_tokens})")


def schedule_flags(p: argparse.ArgumentParser, default: str) -> None:
    from ..decoding.schedule import SCHEDULES

    g = p.add_argument_group("handoff schedule")
    g.add_argument("--schedule", default=default, choices=SCHEDULES, help=f"who writes each token (default {default})")
    g.add_argument("--p", type=FRACTION, default=0.5, help="probability that the senior writes (default 0.5)")
    g.add_argument("--K", type=COUNT, default=32,
                   help="word schedules: tokens before a forced redraw; chunk, chunk-word: tokens or words per chunk "
                   "(default 32)")


def engine_flags(p: argparse.ArgumentParser, server: bool = False) -> None:
    """--engine and the vLLM engine's settings (engines/vllm_engine.py, VLLMSettings); with
    ``server``, also the vllm-server engine and its --server flags."""
    from ..engines.base import DEFAULT_ENGINE, ENGINES, LOCAL_ENGINES, engine_help

    g = p.add_argument_group("engine")
    names = list(ENGINES) if server else list(LOCAL_ENGINES)
    g.add_argument("--engine", default=DEFAULT_ENGINE, choices=names,
                   help=f"{engine_help(names)} (default {DEFAULT_ENGINE})")
    g.add_argument("--vllm-gpu-memory-utilization", type=number(float, 0, 1, lo_open=True), default=0.85,
                   help="vllm: share of GPU memory for weights + KV cache (default 0.85)")
    g.add_argument("--vllm-kv-cache-gib", type=number(float, 0, lo_open=True), default=None,
                   help="vllm: KV-cache size in GiB (default: from the memory share on GPU, 1 GiB on CPU)")
    g.add_argument("--vllm-max-model-len", type=COUNT, default=None, help="vllm: context length (default: the models')")
    g.add_argument("--vllm-block-size", type=COUNT, default=None, help="vllm: tokens per KV block (default: vLLM's)")
    g.add_argument("--vllm-tensor-parallel-size", type=COUNT, default=1, help="vllm: GPUs per model (default 1)")
    g.add_argument("--vllm-max-num-seqs", type=COUNT, default=256,
                   help="vllm: most sequences decoded at once (default 256)")
    if server:
        server_flags(p)


def server_flags(p: argparse.ArgumentParser) -> None:
    """--server URL and how to talk to it (engines/server_client.py, ServerSettings)."""
    import os

    g = p.add_argument_group("server (engine vllm-server: a running `tandem serve`)")
    g.add_argument("--server", default=None, metavar="URL",
                   help="generate on this server (e.g. http://127.0.0.1:8000); implies --engine vllm-server")
    g.add_argument("--api-key", default=os.environ.get("VLLM_API_KEY"), help="the server's key (default $VLLM_API_KEY)")
    g.add_argument("--server-timeout", type=number(float, 0, lo_open=True), default=600.0,
                   help="seconds per request (default 600)")
    g.add_argument("--server-retries", type=number(int, 0), default=3,
                   help="retries of a request after connection errors and 408/429/5xx answers (default 3)")
    g.add_argument("--server-concurrency", type=COUNT, default=32, help="requests in flight at once (default 32)")
    g.add_argument("--server-tokenizer", default=None,
                   help="the served model's tokenizer here (default: the checkpoint path the server reports)")


def engine_of(a, junior_with_server: bool = False) -> str:
    """The engine the flags choose: --server means vllm-server. ``junior_with_server``: --junior may name the
    juniors a server must hold (``tandem eval handoff``: checked against the server's report, a pool routed by
    index; engines/served_pool.py); elsewhere --junior with --server is refused."""
    from ..engines.base import DEFAULT_ENGINE, ENGINES, REMOTE_ENGINE

    engine, server = getattr(a, "engine", DEFAULT_ENGINE), getattr(a, "server", None)
    if server and engine not in (DEFAULT_ENGINE, REMOTE_ENGINE):
        raise TandemError(f"--server sends requests to a running server; --engine {engine} starts one in this "
                          "process: choose one")
    if ENGINES[engine].remote and not server:
        raise TandemError(f"--engine {engine} needs --server URL (a running `tandem serve`)")
    if server and getattr(a, "junior_device", None):
        raise TandemError("--junior-device does not apply with --server: the server holds its juniors "
                          "(tandem serve SENIOR --junior JUNIOR)")
    if server and getattr(a, "junior", None) and not junior_with_server:
        raise TandemError("--junior does not apply with --server here: the server holds its junior "
                          "(tandem serve SENIOR --junior JUNIOR)")
    return REMOTE_ENGINE if server else engine


def server_settings(a):
    if not getattr(a, "server", None):
        return None
    from ..engines.server_client import ServerSettings

    return ServerSettings(a.server, a.api_key, a.server_timeout, a.server_retries, a.server_concurrency,
                          a.server_tokenizer)


def vllm_settings(a):
    from ..engines.base import DEFAULT_ENGINE, engine_kind

    if not engine_kind(getattr(a, "engine", DEFAULT_ENGINE)).vllm_settings:
        return None
    from ..engines.vllm_engine import VLLMSettings

    return VLLMSettings(gpu_memory_utilization=a.vllm_gpu_memory_utilization, kv_cache_gib=a.vllm_kv_cache_gib,
                        max_model_len=a.vllm_max_model_len, block_size=a.vllm_block_size,
                        tensor_parallel_size=a.vllm_tensor_parallel_size, max_num_seqs=a.vllm_max_num_seqs)


def open_from_args(a, schedule: str):
    """(decoder, tokenizer, close) for the command's models, schedule and engine."""
    from ..engines import EngineSetup, RolloutSpec, open_decoder

    setup = EngineSetup(a.senior, a.junior, a.device, getattr(a, "junior_device", None), a.dtype, getattr(a, "seed", 0),
                        vllm_settings(a), server_settings(a))
    return open_decoder(engine_of(a), setup, RolloutSpec(schedule, sampling_from_args(a), a.p, a.K))


def template_flag(p):
    from ..prompting import DEFAULT_INSTRUCTION, INSTRUCTIONS

    p.add_argument("--template", default="auto", help="prompt template: auto, plain, chat (default auto)")
    p.add_argument("--instruction", default=DEFAULT_INSTRUCTION, choices=list(INSTRUCTIONS),
                   help=f"instruction after the problem in chat prompts (default {DEFAULT_INSTRUCTION}: the paper's)")


def sampling_from_args(a):
    from ..decoding.sampling import SamplingParams

    return SamplingParams(a.temperature, a.top_p, a.top_k, a.max_tokens)


def pair_from_args(a, need_junior: bool):
    from ..models import load_pair

    junior = (a.junior or a.senior) if need_junior else None
    return load_pair(a.senior, junior, a.device, getattr(a, "junior_device", None), a.dtype)


def plan_flags(p: argparse.ArgumentParser) -> None:
    """--plan-* flags of `tandem train --dry-run` (planner/memory.py Layout; docs/scale.md)."""
    from ..config.shardings import sharding_help
    from ..planner.memory import OFFLOADS, SHARDINGS

    g = p.add_argument_group("memory plan (--dry-run)")
    g.add_argument("--plan-gpu-gib", type=number(float, 0, lo_open=True), default=None,
                   help="plan for GPUs of this many GiB ('auto' devices become cuda:0; default: the visible GPUs, "
                        "else this machine)")
    g.add_argument("--plan-processes", type=COUNT, default=1, help="training processes, one GPU each (default 1)")
    g.add_argument("--plan-sharding", default=None, choices=SHARDINGS, help="how the processes hold the senior's "
                   f"training state: {sharding_help(plan=True)} (every registered backend; default: the run's "
                   "--sharding, ddp under none)")
    g.add_argument("--plan-offload", default=None, choices=OFFLOADS, help="shards kept in host memory: none, "
                   "optimizer (zero3: master weights, moments, gradients), all (also the parameters); default: the "
                   "run's (all under --shard-offload, else none)")
    g.add_argument("--plan-lora-r", type=number(int, 0), default=0, help="plan LoRA adapters of this rank "
                   "on every linear layer of the body instead of full fine-tuning (default 0: off)")
    g.add_argument("--plan-sync-bucket-mib", type=number(float, 0, lo_open=True), default=None,
                   help="weight-sync bucket under sharding or LoRA, MiB (default: the run's sync_bucket_mb)")


def grader_flag(p, default: str | None = "ours", help_default: str = "ours") -> None:
    """The ``--grader`` flag of every command that grades math (``rewards.math.GRADERS``)."""
    from ..rewards.math import GRADERS

    p.add_argument("--grader", default=default, choices=GRADERS,
                   help=f"math grader: ours (math-verify with repairs, choice labels stripped) or paper (the paper's "
                        f"cascade: mathd, sympy, math-verify; docs/paper_fidelity.md); default {help_default}")
