"""PyTorch models for ``graph=torch_model`` and ``backend=torch``: each function returns
``(module, inputs, targets)``, the form a ``"package.module:function"`` model source returns
(``rlplace.import_.torch_model``)."""

from __future__ import annotations

import torch
from torch import nn


def mlp(batch_size: int = 64, features: int = 256, hidden: int = 512, layers: int = 4, classes: int = 10,
        seed: int = 0) -> tuple[nn.Module, list[torch.Tensor], list[torch.Tensor]]:
    """A stack of ``layers`` Linear + ReLU blocks and a classifier, on random inputs and labels."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    widths = [features] + [hidden] * layers
    blocks = [nn.Sequential(nn.Linear(a, b), nn.ReLU()) for a, b in zip(widths, widths[1:])]
    model = nn.Sequential(*blocks, nn.Linear(widths[-1], classes))
    inputs = torch.randn(batch_size, features, generator=generator)
    targets = torch.randint(0, classes, (batch_size,), generator=generator)
    return model, [inputs], [targets]
