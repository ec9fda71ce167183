"""An ``nn.Module`` block from a paper: ANCRe's learned shortcut sources around existing residual blocks.

Paper: *ANCRe: Adaptive Neural Connection Reassignment* (arXiv 2602.09009; registry slug ``ancre``).
Instead of ``h_k = f_k(h_{k-1}) + h_{k-1}``, each block's shortcut is a learned softmax mixture of the
earlier states, ``h_k = f_k(h_{k-1}) + sum_j w_{k,j} h_j``; ``K (K - 1) / 2`` extra scalars for ``K``
blocks, initialised near the plain residual network.

What it shows: a stack of pre-norm MLP blocks written the usual way (``for f in blocks: h = h + f(h)``)
and the same blocks wrapped in ``ANCReConnector(blocks)``. ``ANCReConnector.fixed_residual(blocks)``
reproduces the plain loop exactly; the learnable connector runs forward and backward (its connection
logits get gradients) and trains with AdamW on a generated regression task, the logits in their own
parameter group without weight decay (``ancre_param_groups``). The learned routing matrix stays
row-stochastic.

Run: ``python examples/nn_ancre_residual.py``.
"""

from __future__ import annotations

import torch
from torch import nn

from neurips26.nn import ANCReConnector
from neurips26.nn.ancre import ancre_param_groups, parameter_overhead

WIDTH = 32
BLOCKS = 6
STEPS = 60


class Block(nn.Module):
    """Pre-norm MLP sub-layer (shape preserving): ``x [B, WIDTH] -> [B, WIDTH]``."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.LayerNorm(WIDTH), nn.Linear(WIDTH, 2 * WIDTH), nn.GELU(), nn.Linear(2 * WIDTH, WIDTH)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Net(nn.Module):
    """Stem -> ``BLOCKS`` blocks joined by an ANCRe connector -> head."""

    def __init__(self, connector: str = "learned") -> None:
        super().__init__()
        self.stem, self.head = nn.Linear(8, WIDTH), nn.Linear(WIDTH, 1)
        blocks = [Block() for _ in range(BLOCKS)]
        self.stack = (
            ANCReConnector.fixed_residual(blocks) if connector == "residual" else ANCReConnector(blocks)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stack(self.stem(x)))


def plain_residual(net: Net, x: torch.Tensor) -> torch.Tensor:
    """The same weights with the textbook loop ``h = h + f(h)``."""
    h = net.stem(x)
    for block in net.stack.blocks:
        h = h + block(h)
    return net.head(h)


def main(seed: int = 0) -> dict:
    """Check the residual reduction, run forward/backward, train the learnable connector.

    Returns
    -------
    dict
        ``residual_max_diff`` (fixed-residual connector vs the plain loop; 0.0 = exact), ``output_shape``,
        ``logit_grad_norm`` (gradient reaching the connection logits), ``losses`` (train loss per step),
        ``test_loss_before``/``test_loss_after``, ``row_sums_max_dev`` (largest ``|sum_j w_kj - 1|``),
        ``extra_fraction`` (connection scalars over the other parameters).
    """
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(512, 8, generator=g)
    y = torch.sin(x[:, :1] * 2) + x[:, 1:2] * x[:, 2:3]  # a nonlinear target [512, 1]
    xtr, ytr, xte, yte = x[:384], y[:384], x[384:], y[384:]

    torch.manual_seed(seed)
    residual = Net("residual")
    with torch.no_grad():
        residual_diff = float((residual(xte) - plain_residual(residual, xte)).abs().max())

    torch.manual_seed(seed)
    net = Net("learned")
    out = net(xtr[:16])  # forward: [16, 1]
    nn.functional.mse_loss(out, ytr[:16]).backward()  # backward reaches blocks and connection logits
    logit_grad = float(net.stack.logits.grad.norm())
    net.zero_grad()

    opt = torch.optim.AdamW(ancre_param_groups(net, base_lr=3e-3, weight_decay=0.01))
    with torch.no_grad():
        before = float(nn.functional.mse_loss(net(xte), yte))
    losses = []
    for _ in range(STEPS):
        idx = torch.randint(0, len(xtr), (64,), generator=g)
        opt.zero_grad()
        loss = nn.functional.mse_loss(net(xtr[idx]), ytr[idx])
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    with torch.no_grad():
        after = float(nn.functional.mse_loss(net(xte), yte))
        routing = net.stack.topology()  # [BLOCKS, BLOCKS + 1], row k-1 = block k's weights over h_0..h_K
    row_dev = float((routing.sum(1) - 1).abs().max())
    extra = parameter_overhead(net)["fraction"]

    print(f"fixed-residual connector vs plain loop: max diff {residual_diff:.1e}")
    print(
        f"output {tuple(out.shape)}; gradient norm on the {net.stack.num_learnable} connection logits {logit_grad:.3e}"
    )
    print(
        f"test MSE {before:.3f} -> {after:.3f} after {STEPS} AdamW steps; extra parameters {100 * extra:.2f}%"
    )
    print(
        "learned shortcut weights of the last block over h_0..h_5:",
        [round(v, 3) for v in routing[-1, :BLOCKS].tolist()],
    )
    return {
        "residual_max_diff": residual_diff,
        "output_shape": list(out.shape),
        "logit_grad_norm": logit_grad,
        "losses": losses,
        "test_loss_before": before,
        "test_loss_after": after,
        "row_sums_max_dev": row_dev,
        "extra_fraction": extra,
    }


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
