r"""A residual MLP classifier whose block-to-block wiring is a pluggable connector (the ANCRe claim's E2 testbed).

Moved unchanged out of :mod:`neurips26.claims.ancre` (issue 36 item 1): the model is testbed, not the paper's
component; the connector (:class:`neurips26.nn.ancre.ANCReConnector` or a fixed residual/dense topology) is.

.. math::

    h_0 = W_s x, \qquad h_{\text{out}} = \operatorname{ANCReSequential}(f_1, \dots, f_K; c)(h_0), \qquad
    \hat y = W_o \operatorname{LN}(h_{\text{out}}), \qquad f_k(h) = W_{2,k} \operatorname{GELU}(W_{1,k} \operatorname{LN}(h))

Shapes: ``x`` ``(B, in_features)`` -> logits ``(B, classes)``; hidden states ``(B, width)``.
"""

from __future__ import annotations

import torch
from torch import nn

from neurips26.common.checks import check_int
from neurips26.nn.ancre import ANCReConnector, ANCReSequential


class MLPBlock(nn.Module):
    """Pre-norm two-layer MLP block ``LN -> Linear(width, hidden) -> GELU -> Linear(hidden, width)``."""

    def __init__(self, width: int, hidden: int) -> None:
        check_int("width", width, low=1)
        check_int("hidden", hidden, low=1)
        super().__init__()
        self.net = nn.Sequential(
            nn.LayerNorm(width), nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, width)
        )

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.net(h)


class ConnectedResMLP(nn.Module):
    """Stem, ``blocks`` :class:`MLPBlock` s wired by ``connector``, final norm and linear head.

    The stem, blocks, norm and head are initialised under ``torch.manual_seed(seed)`` inside a forked RNG
    (the caller's global RNG state is left as it was), so every connector sees the same initial network.
    """

    def __init__(
        self,
        connector: ANCReConnector,
        *,
        width: int,
        hidden: int,
        blocks: int,
        seed: int,
        in_features: int = 64,
        classes: int = 10,
    ) -> None:
        if not isinstance(connector, ANCReConnector):
            raise TypeError(f"connector must be an ANCReConnector, got {type(connector).__name__}")
        for name, value in (("width", width), ("hidden", hidden), ("blocks", blocks)):
            check_int(name, value, low=1)
        check_int("in_features", in_features, low=1)
        check_int("classes", classes, low=1)
        check_int("seed", seed, low=0)
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.stem = nn.Linear(in_features, width)
            body = [MLPBlock(width, hidden) for _ in range(blocks)]
            self.norm = nn.LayerNorm(width)
            self.head = nn.Linear(width, classes)
        self.body = ANCReSequential(body, connector)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.body(self.stem(x))))


__all__ = ["ConnectedResMLP", "MLPBlock"]
