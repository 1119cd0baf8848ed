"""A CPU stand-in for VLLMNCCLTransport: the same rank-0 broadcast, over a gloo group instead of NCCL.

Injected as `NCCLStrategy(transport=GlooTransport())`, it lets tests drive the nccl strategy's whole HTTP
protocol against tests/train/fake_vllm.py (whose receiver is the matching gloo worker) on a machine with no GPU.
"""

from __future__ import annotations

import datetime
from typing import Any, Iterable


class GlooTransport:
    device = "cpu"
    packed = False  # tensor by tensor; the fake does not unpack vLLM's packed buffers

    def __init__(self, timeout: float = 20.0):
        self.timeout = datetime.timedelta(seconds=timeout)
        self.inits = 0  # how many groups were formed (the strategy should form one and keep it)
        self.sent: list[str] = []  # names, in the order they went out
        self._stores: list[Any] = []  # the store server (rank 0 hosts it) must outlive its group

    def init(self, master_address: str, master_port: int, world_size: int) -> Any:
        import torch.distributed as dist

        store = dist.TCPStore(master_address, master_port, world_size, True, timeout=self.timeout)
        self._stores.append(store)
        self.inits += 1
        return dist.ProcessGroupGloo(store, 0, world_size, self.timeout)

    def send(self, group: Any, named_tensors: Iterable[tuple[str, Any]]) -> None:
        import torch.distributed as dist

        options = dist.BroadcastOptions()
        options.rootRank = 0
        for name, tensor in named_tensors:
            assert tensor.device.type == self.device
            group.broadcast([tensor.contiguous()], options).wait()
            self.sent.append(name)
