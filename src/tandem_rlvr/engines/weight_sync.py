"""Pushing the trainer's senior into a running ``tandem serve --weight-sync`` (vLLM's own path).

vLLM 0.32 updates a running server's weights through its weight-transfer engines: the
server runs with ``--weight-transfer-config '{"backend": ...}'`` and its RL endpoints
(``/init_weight_transfer_engine``, ``/start_weight_update``, ``/update_weights``,
``/finish_weight_update``; opened by ``VLLM_SERVER_DEV_MODE=1``), and the trainer drives them
with a trainer-side engine and ``HTTPVLLMWeightSyncClient``. Received checkpoint-format
weights go through the model's own ``load_weights`` inside vLLM's layer-wise reload, so
``TandemForCausalLM`` routes the senior's (unprefixed) names to its senior half and the
junior half is never touched.

Backends: ``nccl`` is vLLM's (GPU). vLLM ships no CPU backend, so this module adds
``tandem_gloo``: the same protocol over a gloo process group (vLLM's stateless group
helper), registered with vLLM's weight-transfer factories by name in our
``vllm.general_plugins`` hook (``vllm_plugin``), so the server's worker finds it. It is what lets
the CPU tests check the whole path; on GPU use ``nccl``. ``push_stream`` sends a trainer's stream of
tensors through either backend as one update, bucket by bucket. This is the one module that touches
vLLM's weight-transfer surface (guarded by tests/distributed/test_vllm_server_train.py).

Security: vLLM's development endpoints carry no authentication (not even ``--api-key``):
a server with ``--weight-sync`` should listen on loopback or a private network only.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import ClassVar

import torch
from vllm.distributed.weight_transfer.base import (ParamMeta, TrainerInitInfo, TrainerWeightTransferEngine,
                                                   WeightSource, WeightTransferEngine, WeightTransferInitInfo,
                                                   WeightTransferUpdateInfo)

GLOO = "tandem_gloo"


@dataclass
class GlooInitInfo(WeightTransferInitInfo):
    """Worker side: where the trainer's rendezvous is, the worker's rank offset, group size."""

    master_address: str
    master_port: int
    rank_offset: int
    world_size: int


@dataclass
class GlooUpdateInfo(WeightTransferUpdateInfo):
    """One round: the tensors the trainer broadcasts next, in order."""

    names: list[str]
    dtype_names: list[str]
    shapes: list[list[int]]


@dataclass
class GlooTrainerInitInfo(TrainerInitInfo):
    """Trainer side: the rendezvous it opens (rank 0), the group size (1 + server workers) and how
    long the trainer waits for the server's workers at the rendezvous and each broadcast (None:
    gloo's default, 30 minutes)."""

    backend: ClassVar[str] = GLOO
    master_address: str
    master_port: int
    world_size: int
    timeout_s: float | None = None


def _group(address: str, port: int, rank: int, world_size: int, timeout_s: float | None = None, listen_socket=None):
    """The trainer's gloo group with the server's workers. The trainer (rank 0) hands over the
    socket its store listens on: with a rendezvous instead, a trainer under torchrun would join
    the launcher's store (``TORCHELASTIC_USE_AGENT_STORE``) and wait for a store nobody serves."""
    from datetime import timedelta

    from vllm.distributed.utils import stateless_init_torch_distributed_process_group

    return stateless_init_torch_distributed_process_group(
        address, port, rank, world_size, backend="gloo", listen_socket=listen_socket,
        timeout=None if timeout_s is None else timedelta(seconds=timeout_s))


def _broadcast(group, tensor: torch.Tensor) -> None:
    """Broadcast from group rank 0 on a stateless group (``dist.broadcast`` needs a global rank)."""
    import torch.distributed as dist

    opts = dist.BroadcastOptions()
    opts.rootRank, opts.rootTensor = 0, 0
    group.broadcast([tensor], opts).wait()


class GlooWeightTransferEngine(WeightTransferEngine[GlooInitInfo, GlooUpdateInfo]):
    """Server worker side of ``tandem_gloo``: receive each tensor, load it, reload layer-wise."""

    init_info_cls = GlooInitInfo
    update_info_cls = GlooUpdateInfo
    supports_draft_weight_update = False

    def __init__(self, config, vllm_config, device, model):
        super().__init__(config, vllm_config, device, model)
        self.group = None

    def init_transfer_engine(self, init_info: GlooInitInfo) -> None:
        pc = self.parallel_config
        rank = pc.data_parallel_index * pc.world_size + pc.rank + init_info.rank_offset
        self.group = _group(init_info.master_address, init_info.master_port, rank, init_info.world_size)

    def start_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        initialize_layerwise_reload(self.model)

    def finish_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        finalize_layerwise_reload(self.model, self.model_config)

    def update_weights(self, update_info: dict) -> None:
        self.receive_weights(self.parse_update_info(update_info))  # gloo is synchronous: no device sync

    def receive_weights(self, update_info: GlooUpdateInfo) -> None:
        if self.group is None:
            raise RuntimeError("tandem_gloo weight transfer not initialised: call init_weight_transfer_engine first")
        tensors = zip(update_info.names, update_info.dtype_names, update_info.shapes, strict=True)
        for name, dtype_name, shape in tensors:
            weight = torch.empty(shape, dtype=getattr(torch, dtype_name))
            _broadcast(self.group, weight)
            self.model.load_weights([(name, weight.to(self.device))])

    def shutdown(self) -> None:
        self.group = None


class GlooTrainerWeightTransferEngine(TrainerWeightTransferEngine[GlooTrainerInitInfo]):
    """Trainer side of ``tandem_gloo`` (one sending process): open the group with the server's
    workers, then per ``send_weights`` run the server's update round trip while broadcasting."""

    init_info_cls = GlooTrainerInitInfo

    @classmethod
    def trainer_init(cls, init_info: GlooTrainerInitInfo, *, client, source=None):
        if source is None:
            raise ValueError("tandem_gloo weight transfer needs a WeightSource")
        import socket

        engine = cls(client=client, source=source, is_sender=init_info.is_sender)
        worker = GlooInitInfo(init_info.master_address, init_info.master_port, 1, init_info.world_size)
        listening = socket.create_server((init_info.master_address, init_info.master_port))  # before the workers call
        with ThreadPoolExecutor(max_workers=1) as exe:
            pending = exe.submit(client.init_weight_transfer_engine, asdict(worker))
            engine.group = _group(init_info.master_address, init_info.master_port, 0, init_info.world_size,
                                  init_info.timeout_s, listen_socket=listening)
            pending.result()
        return engine

    def send_weights(self) -> None:
        meta = self.source.metadata()
        info = GlooUpdateInfo([m.name for m in meta], [str(m.dtype).split(".")[-1] for m in meta],
                              [list(m.shape) for m in meta])
        self.client.start_weight_update()
        with ThreadPoolExecutor(max_workers=1) as exe:
            pending = exe.submit(self.client.update_weights, asdict(info))
            for _, tensor in self.source:
                _broadcast(self.group, tensor.detach().to("cpu").contiguous())
            pending.result()
        self.client.finish_weight_update()

    def shutdown(self) -> None:
        self.group = None



class ListSource(WeightSource):
    """A ``WeightSource`` over a list of materialised (name, tensor) pairs: one push round."""

    def __init__(self, pairs: list[tuple[str, torch.Tensor]]):
        self.pairs = pairs

    def metadata(self) -> list[ParamMeta]:
        return [ParamMeta(name, t.dtype, tuple(t.shape)) for name, t in self.pairs]

    def __iter__(self):
        return iter(self.pairs)


class _RoundsOnly:
    """The trainer's sync client with the update's start and finish left to ``push_stream``, so
    each ``send_weights`` is one round (``update_weights``) of a single update."""

    def __init__(self, client):
        self.client = client

    def start_weight_update(self) -> None:
        pass

    def finish_weight_update(self, weight_version=None) -> None:
        pass

    def __getattr__(self, name):
        return getattr(self.client, name)


def push_stream(transfer: TrainerWeightTransferEngine, weights, bucket_bytes: int) -> None:
    """Push a stream of (name, tensor) pairs through a trainer-side engine (ours or vLLM's nccl)
    as ONE weight update: ``start_weight_update``, one ``update_weights`` round per bucket of at
    most ``bucket_bytes`` (a tensor larger than that goes alone), ``finish_weight_update``. vLLM's
    engines need each round's metadata before its tensors; the bucket holds it, so at most one
    bucket of the stream is held at a time. One update means one layer-wise reload on the server,
    so a layer whose tensors fall in two rounds is still processed whole."""
    client = transfer.client
    client.start_weight_update()
    transfer.client = _RoundsOnly(client)
    try:
        bucket, size = [], 0
        for name, tensor in weights:
            bucket.append((name, tensor))
            size += tensor.numel() * tensor.element_size()
            if size >= bucket_bytes:
                transfer.source = ListSource(bucket)
                transfer.send_weights()
                bucket, size = [], 0
        if bucket:
            transfer.source = ListSource(bucket)
            transfer.send_weights()
    finally:
        transfer.client, transfer.source = client, ListSource([])
    client.finish_weight_update()
