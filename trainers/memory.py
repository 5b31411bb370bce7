"""Exact memory accounting on CPU: parameters, gradients, optimizer state, saved activations.

On CUDA the allocator's peak is the measurement. A CPU has no such counter, so we count what a
training step must hold: every parameter, its gradient, the optimizer's state, and at the peak
of the step, the tensors autograd saved for backward. The last is measured with saved-tensor
hooks during the forward pass (unique storages, parameters excluded; a recomputed block holds
only its input, which a forward pre-hook counts).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch
from torch import nn


class SavedActivationMeter:
    """Measures the bytes saved for backward by each forward pass run inside `measure()`."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.param_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.peak_bytes = 0
        self.last_bytes = 0

    @contextlib.contextmanager
    def measure(self) -> Iterator[None]:
        seen: dict[int, int] = {}

        def note(t: torch.Tensor) -> None:
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
            if ptr not in self.param_storages:
                seen.setdefault(ptr, storage.nbytes())

        def pack(t: torch.Tensor) -> torch.Tensor:
            note(t)
            return t

        handles = [m.register_forward_pre_hook(lambda _m, args: note(args[0]))
                   for m in self.model.modules() if getattr(m, "checkpoint", False)]
        try:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                yield
        finally:
            for h in handles:
                h.remove()
        self.last_bytes = sum(seen.values())
        self.peak_bytes = max(self.peak_bytes, self.last_bytes)


def tensor_bytes(tensors: Iterable[object]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def training_state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Parameters + gradients (one per trainable parameter) + optimizer state, in bytes."""
    params = list(model.parameters())
    state = [v for s in optimizer.state.values() for v in s.values()]
    grads = [p for p in params if p.requires_grad]
    return tensor_bytes(params) + tensor_bytes(grads) + tensor_bytes(state) \
        + tensor_bytes(model.buffers())
