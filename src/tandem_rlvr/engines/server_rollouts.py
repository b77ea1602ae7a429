"""``--engine vllm-server`` behind the seam: rollouts from a running ``tandem serve``.

``ServerRollouts`` draws decoders from ``engines.server_client`` (``ServerDecoder``: one
completion request per row, its row seed seeding coins and sampler), so the trainer's devices
do no generation. An evaluation loads the served model's tokenizer (``--server-tokenizer``,
else the checkpoint path the server reports); a training run uses its own.

Weights (training): the server is ``tandem serve SENIOR --junior JUNIOR --weight-sync``, the
checkpoints the run trains from with vLLM's weight transfer enabled. ``load_weights`` pauses the server's
scheduler (requests in flight wait), joins the server's weight transfer on first use (``nccl`` when the
trainer is on CUDA, ``tandem_gloo`` on CPU; the trainer is rank 0 of a group with the server's workers,
reached at the local address that routes to the server), then pushes the stream as one update in rounds of at most
``bucket_bytes`` (``engines.weight_sync.push_stream``), then resets the server's prefix cache,
since cached KV blocks hold the old weights' keys, and resumes the scheduler. Tensors go in the served model's dtype
(``weight_dtype``: the server's own, read from vLLM's ``/server_info``, which ``--weight-sync``
opens), so a sharded senior is cast on its shards before they are gathered.

Several training processes (DDP or FSDP2, on one machine or several) share the server: each
sends its own rollout requests; the main process alone pushes the weights (``EngineKind.
one_sender``; ``rl.weights.EngineSync`` has the others gather each bucket alongside, then wait
until the push is complete). Every wait is bounded: HTTP requests and the ``tandem_gloo``
weight-transfer group by the client's timeout (``ServerSettings.timeout``, 600 s), the
processes' collectives by ``dist_timeout_s``; a server that is gone or stops answering is a
one-line error.

A junior pool: the server is ``tandem serve SENIOR --junior A,B,...`` with the run's pool in the run's
order; each request names its row's junior by index (``tandem_junior``), and a server that holds fewer
juniors refuses the request (HTTP 400, a one-line error here).

The server's junior (or pool, in order) must be the run's: the server reports what it holds and the
run checks it before any model loads (``served_pool.check_served_juniors``, called by training's
``rl.assemble`` and by ``tandem eval handoff --junior``). Limits: the server serves other clients
meanwhile; a request of theirs in flight during a push waits for it, then goes on under the new weights.
"""

from __future__ import annotations

import itertools
import logging
import socket
from typing import Iterable, Sequence
from urllib.parse import urlparse

import torch

from ..errors import TandemError
from .base import EngineSetup, RolloutSpec

log = logging.getLogger("tandem_rlvr")

BUCKET_BYTES = 1 << 29  # one push round: 512 MiB of tensors


def _local_address_towards(url: str) -> str:
    """This machine's address on the interface that reaches ``url``'s host (the rendezvous the
    server's workers connect back to)."""
    u = urlparse(url)
    with socket.create_connection((u.hostname, u.port or 80), timeout=10) as s:
        return s.getsockname()[0]


def free_port(address: str = "127.0.0.1") -> int:
    """A TCP port free on ``address`` now (the OS picks it)."""
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


class ServerRollouts:
    """Rollouts on a ``tandem serve`` server; see the module docstring."""

    name = "vllm-server"

    def __init__(self, settings, tokenizer, eos_ids, client, model: str, root: str, context: int | None,
                 bucket_bytes: int = BUCKET_BYTES):
        self.settings, self.tokenizer, self.eos_ids = settings, tokenizer, list(eos_ids)
        self.client, self.model, self.root, self.context = client, model, root, context
        self.bucket_bytes = bucket_bytes
        self.transfer = None
        self.syncs = 0
        self._dtype = ...  # the served dtype once asked (None: not reported)

    @property
    def weight_dtype(self) -> torch.dtype | None:
        """The served model's dtype, from vLLM's ``/server_info`` (a development endpoint,
        open on a ``--weight-sync`` server); None (tensors as the trainer holds them) without it."""
        if self._dtype is ...:
            import requests

            self._dtype = None
            try:
                r = requests.get(f"{self.settings.base_url[: -len('/v1')]}/server_info",
                                 params={"config_format": "json"}, timeout=self.settings.timeout)
                name = str(r.json()["vllm_config"]["model_config"]["dtype"]) if r.ok else ""
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise TandemError(f"{self.settings.url}: no server answered ({type(e).__name__})") from None
            dtype = getattr(torch, name.removeprefix("torch."), None) if name else None
            self._dtype = dtype if isinstance(dtype, torch.dtype) else None
        return self._dtype

    def decoder(self, spec: RolloutSpec):
        from .server_client import ServerDecoder

        dec = ServerDecoder(self.settings, self.client, self.model, self.context, self.tokenizer, self.eos_ids,
                            spec.schedule, spec.sampling, spec.p, spec.K)
        dec.models = {"senior": self.root, "junior": None if spec.schedule == "senior" else "served"}  # run records
        return dec

    def generate(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int], spec: RolloutSpec,
                 juniors: Sequence[int] | None = None):
        """Rollouts of ``prompts``; ``juniors``: a served pool's junior index per row (None: the first)."""
        return self.decoder(spec).generate(prompts, seeds, juniors)

    def _join(self, device: torch.device) -> None:
        """Join the server's weight transfer: the backend follows the device of the trainer's
        tensors (nccl on CUDA, tandem_gloo on CPU), as ``tandem serve --weight-sync`` picks it on
        the server."""
        if self.transfer is not None:
            return
        import requests
        from vllm.distributed.weight_transfer.clients import HTTPVLLMWeightSyncClient
        from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

        from .vllm_engine import require_vllm

        require_vllm()  # registers tandem_gloo with the factories
        from .weight_sync import GLOO, ListSource

        base = self.settings.base_url[: -len("/v1")]
        try:
            r = requests.get(f"{base}/get_world_size", params={"include_dp": "true"}, timeout=30)
        except OSError as e:
            raise TandemError(f"{self.settings.url}: no server answered ({e})") from None
        if r.status_code == 404:
            raise TandemError(f"{self.settings.url} takes no weight pushes: start it with `tandem serve ... "
                              "--weight-sync`") from None
        r.raise_for_status()
        world = 1 + int(r.json()["world_size"])
        address = _local_address_towards(self.settings.url)
        port = free_port(address)
        if device.type == "cuda":
            from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo as Info
        else:
            from .weight_sync import GlooTrainerInitInfo as Info
        log.info("weight sync with %s: %s, trainer %s:%d, %d processes", self.settings.url, Info.backend, address,
                 port, world)
        self.sync_client = HTTPVLLMWeightSyncClient(base, timeout=self.settings.timeout)
        bound = {"timeout_s": self.settings.timeout} if Info.backend == GLOO else {}  # a mute server is an error
        info = Info(master_address=address, master_port=port, world_size=world, rank=0, **bound)
        self.transfer = WeightTransferTrainerFactory.trainer_init(info, client=self.sync_client,
                                                                  source=ListSource([]))
        self.reset_url = f"{base}/reset_prefix_cache"
        self.base = base

    @torch.no_grad()
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Push the stream to the server's senior as one update, then drop its stale prefix cache. The server's
        scheduler is paused meanwhile (vLLM's ``/pause?mode=keep``: requests in flight are frozen, then go on
        under the new weights after ``/resume``): vLLM's layer-wise reload empties each layer while it loads it,
        and a forward in between kills the engine (seen on CPU: ``onednn_mm`` on meta tensors), so a push never
        meets a running forward, whoever's request it is."""
        import requests

        from .weight_sync import push_stream

        it = iter(weights)
        first = next(it, None)
        if first is None:
            return
        try:
            self._join(first[1].device)
            requests.post(f"{self.base}/pause", params={"mode": "keep"}, timeout=self.settings.timeout) \
                .raise_for_status()
            try:
                push_stream(self.transfer, itertools.chain([first], it), self.bucket_bytes)
                r = requests.post(self.reset_url, timeout=self.settings.timeout)
                r.raise_for_status()
            finally:
                requests.post(f"{self.base}/resume", timeout=self.settings.timeout).raise_for_status()
        except (OSError, RuntimeError) as e:  # requests' errors are OSErrors; gloo's RuntimeErrors
            raise TandemError(f"{self.settings.url}: the weight push failed (is the server still up?): "
                              f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
        if not r.json().get("success", True):
            log.warning("%s kept its prefix cache (other requests hold blocks): their prompts may reuse KV of the "
                        "previous weights", self.settings.url)
        self.syncs += 1

    def sleep(self) -> None:
        """Nothing to free here: the server's memory is its own."""

    def close(self) -> None:
        if self.transfer is not None:
            try:
                self.sync_client.shutdown_weight_transfer_engine()
            except OSError:  # the server is gone already
                pass
            self.transfer.shutdown()
            self.transfer = None
        self.client.close()


def open_server(setup: EngineSetup) -> ServerRollouts:
    """Connect to ``setup.server``; the tokenizer is the training run's, or the served model's."""
    from ..models import load_tokenizer
    from .server_client import connect
    from .vllm_engine import model_eos_ids

    if setup.server is None:
        raise TandemError("engine vllm-server needs a server: --server URL (a running `tandem serve`)")
    client, model, root, ctx = connect(setup.server)
    if setup.pair is not None:
        tok, eos = setup.pair.tokenizer, setup.pair.eos_ids
    else:
        where = setup.server.tokenizer or root
        try:
            tok = load_tokenizer(where)
        except (OSError, ValueError) as e:
            client.close()
            raise TandemError(f"cannot load the served model's tokenizer from {where!r} here ({type(e).__name__}); "
                              "pass --server-tokenizer PATH") from None
        eos = model_eos_ids(tok, where)
    return ServerRollouts(setup.server, tok, eos, client, model, root, ctx)
