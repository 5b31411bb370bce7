"""SwiGLU MLP, used for the dense layers and the shared experts: w2(silu(w1 x) * w3 x)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from trainers.nn import fusion
from trainers.nn.fp8 import Fp8Linear


class MLP(nn.Module):
    def __init__(self, dim: int, inter_dim: int) -> None:
        super().__init__()
        self.w1 = Fp8Linear(dim, inter_dim)
        self.w2 = Fp8Linear(inter_dim, dim)
        self.w3 = Fp8Linear(dim, inter_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if fusion.active(x):
            out: torch.Tensor = self.w2(fusion.swiglu(self.w1(x), self.w3(x)))
            return out
        out = self.w2(F.silu(self.w1(x)) * self.w3(x))
        return out
