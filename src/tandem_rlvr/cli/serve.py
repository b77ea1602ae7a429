"""``tandem serve``: its flags (vLLM's own pass through unchanged), read into ``engines.serve.ServeSettings``;
the server: ``engines/serve.py``."""

from __future__ import annotations

import os

from ..engines.serve import WEIGHT_SYNCS, ServeSettings, run_server
from .flags import number


def cmd_serve(a) -> None:
    """``tandem serve``: the flags as ``ServeSettings``, then the server."""
    run_server(ServeSettings(senior=a.senior, junior=a.junior, host=a.host, port=a.port, api_key=a.api_key,
                             dtype=a.dtype, kv_cache_gib=a.kv_cache_gib, weight_sync=a.weight_sync,
                             vllm_args=tuple(a.vllm_args)))


def register(sub, parser_class) -> None:
    """Add ``tandem serve`` to the subcommands."""
    class _PassThrough(parser_class):
        """Flags this parser does not know are vLLM's: kept, in order, for the server."""

        def parse_known_args(self, args=None, namespace=None):
            ns, extra = super().parse_known_args(args, namespace)
            ns.vllm_args = [x for x in extra if x != "--"]
            return ns, []

    s = sub.add_parser("serve", help="serve tandem generation: vLLM's OpenAI-compatible server with the plugin",
                       description="Start vLLM's OpenAI-compatible server for a senior and junior. Flags not "
                                   "listed here go to vLLM unchanged (e.g. --max-num-seqs 8).")
    s.__class__ = _PassThrough
    s.add_argument("senior", help="senior: directory, .gguf file, hub id or built-in name (tiny)")
    s.add_argument("--junior", default=None, help="junior (same tokenizer), or a pool A,B,... served in one model "
                   "(a request's tandem_junior index picks one); default: the senior's checkpoint")
    s.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1; vLLM's own "
                   "default, every interface, must be asked for: --host 0.0.0.0)")
    s.add_argument("--port", type=number(int, 1, 65535), default=8000, help="port (default 8000)")
    s.add_argument("--api-key", default=os.environ.get("VLLM_API_KEY"),
                   help="key clients must send (Authorization: Bearer KEY); default $VLLM_API_KEY")
    s.add_argument("--dtype", default="auto", help="float32, bfloat16, float16 or auto (bf16 on CUDA, else fp32)")
    s.add_argument("--kv-cache-gib", type=number(float, 0, lo_open=True), default=None,
                   help="KV-cache GiB (default: vLLM's share of GPU memory; 1 GiB on CPU)")
    s.add_argument("--weight-sync", nargs="?", const="auto", default=None, choices=WEIGHT_SYNCS,
                   help="accept weight pushes from a trainer (tandem train --engine vllm-server): vLLM's weight "
                        "transfer, nccl on GPU, tandem_gloo on CPU (auto). Opens vLLM's development endpoints, "
                        "which take no API key")
    s.set_defaults(fn=cmd_serve, vllm_args=[])
