"""Training rollouts from a running server (``engine: vllm-server``, ``server: URL``).

The server is ``tandem serve SENIOR --junior JUNIOR --weight-sync``: the same checkpoints the
run trains from, with vLLM's weight transfer enabled. ``ServerRollouts`` has the interface of
the colocated engine (``rl.vllm_rollouts.EngineRollouts``): rollouts and validation draw
decoders from it (``engines.server_client.ServerDecoder``: one completion request per row,
its row seed seeding coins and sampler), so the trainer's devices do no generation.

Weights in sync: before any generation, if the trainer's senior changed since the last push
(a new optimiser step, or the first call of a run, which covers a resumed run), its
parameters are pushed with vLLM's weight-transfer protocol (``engines.weight_sync``: the
``nccl`` backend on GPU, ``tandem_gloo`` on CPU; the trainer is rank 0 of a group with the
server's workers, reached at the local address that routes to the server), then the
server's prefix cache is reset, since cached KV blocks hold the old weights' keys.

Limits: one training process (data-parallel training would need one sender and the others
waiting; not built); the server's junior must be the run's junior (the server does not say
which junior it holds; the run records the server's checkpoint). The server serves other
clients meanwhile, and their requests during a push see a mix of old and new weights.
"""

from __future__ import annotations

import logging
import os
import socket
from urllib.parse import urlparse

import torch

from ..errors import TandemError

log = logging.getLogger("tandem_rlvr")


def _local_address_towards(url: str) -> str:
    """This machine's address on the interface that reaches ``url``'s host (the rendezvous the
    server's workers connect back to)."""
    u = urlparse(url)
    with socket.create_connection((u.hostname, u.port or 80), timeout=10) as s:
        return s.getsockname()[0]


def _free_port(address: str) -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


class ServerRollouts:
    """Rollouts on a ``tandem serve --weight-sync`` server; see the module docstring."""

    data_parallel = False

    def __init__(self, cfg, tokenizer, eos_ids, tandem: bool):
        from ..engines.server_client import ServerSettings, connect

        if not cfg.server:
            raise TandemError("engine vllm-server needs --server URL (a running `tandem serve --weight-sync`)")
        self.cfg, self.tok, self.eos_ids, self.tandem = cfg, tokenizer, list(eos_ids), tandem
        self.settings = ServerSettings(cfg.server, api_key=os.environ.get("VLLM_API_KEY"))
        self.client, self.model, self.root, self.context = connect(self.settings)
        self.junior_path = None  # the server holds the junior
        self.transfer = None
        self.synced = None  # (id of the model, global step) whose weights the server holds
        self.syncs = 0

    def open(self, model) -> None:
        """Join the server's weight transfer: the backend follows the trainer's device (nccl on
        CUDA, tandem_gloo on CPU), as ``tandem serve --weight-sync`` picks it on the server."""
        if self.transfer is not None:
            return
        import requests
        from vllm.distributed.weight_transfer.base import ModuleSource
        from vllm.distributed.weight_transfer.clients import HTTPVLLMWeightSyncClient
        from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

        from ..engines.vllm_engine import require_vllm

        require_vllm()  # registers tandem_gloo with the factories
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
        port = _free_port(address)
        on_cuda = next(model.parameters()).device.type == "cuda"
        if on_cuda:
            from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo as Info
        else:
            from ..engines.weight_sync import GlooTrainerInitInfo as Info
        log.info("weight sync with %s: %s, trainer %s:%d, %d processes", self.settings.url, Info.backend, address,
                 port, world)
        self.sync_client = HTTPVLLMWeightSyncClient(base, timeout=self.settings.timeout)
        self.transfer = WeightTransferTrainerFactory.trainer_init(
            Info(master_address=address, master_port=port, world_size=world, rank=0), client=self.sync_client,
            source=ModuleSource(model))
        self.source_model, self.reset_url = model, f"{base}/reset_prefix_cache"

    def decoder(self, model, step: int, schedule: str, sampling, p: float = 0.5, K: int = 32):
        """A decoder on the server, which holds ``model``'s current weights (pushed if they changed)."""
        from ..engines.server_client import ServerDecoder

        self.open(model)
        if self.synced != (id(model), step):
            self.sync(model)
            self.synced = (id(model), step)
        return ServerDecoder(self.settings, self.client, self.model, self.context, self.tok, self.eos_ids, schedule,
                             sampling, p, K)

    @torch.no_grad()
    def sync(self, model) -> None:
        """Push ``model``'s parameters to the server's senior, then drop its stale prefix cache."""
        import requests

        if self.source_model is not model:
            raise TandemError("the trained senior changed identity during the run; its weights cannot be pushed")
        self.transfer.send_weights()
        r = requests.post(self.reset_url, timeout=self.settings.timeout)
        r.raise_for_status()
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
