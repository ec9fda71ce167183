r"""AMPS: instance-aware modality-preference steering scaled by a functional-entropy Modality Contribution Ratio.

Paper
-----
AMPS, instance-aware modality-preference steering (arXiv 2602.12533); seed file ``004_01f475bc147a144d.txt``,
abstract beginning "Multimodal Large Language Models (MLLMs) often". A fixed modality-steering vector added
with one global strength either fails on stubborn samples or breaks generation on sensitive ones; AMPS
measures per sample how much each modality contributes (functional entropy of the output under Gaussian
perturbations of that modality's embeddings, Gat et al. 2020, arXiv 2010.10802) and scales the steering
strength by it. Public: the abstract and public summaries, the functional-entropy framework of Gat et al. and
the MC^2 steering baseline. Inferred: the scaling form and the module architecture (marked below).

Math
----
.. math::
    \mathrm{Ent}_\mu(f) = \mathbb{E}[f \log f] - \mathbb{E}[f] \log \mathbb{E}[f], \qquad
    \mathrm{MCR}_v = \frac{\mathrm{Ent}_v}{\mathrm{Ent}_v + \mathrm{Ent}_t}, \qquad
    \alpha_b = \alpha_{max}\,(1 - \mathrm{MCR}^{target}_b)^{\gamma},

and the hidden state at layer :math:`l` becomes :math:`h_l + \alpha_b v_l` (the scaling form and
the module architecture are inferred; the paper's were not available). Hooks sit on
``model.model.layers[l]``, the standard Llama-family module tree, so any such model is steered.

Shapes
------
- :func:`modality_contributions`: ``inputs_embeds [B, L, d]``, ``modality_masks`` name -> ``[B, L]``
  (bool), ``forward_fn``: ``[B, L, d] -> [B, V]`` answer logits -> name -> ``[B]`` functional entropies.
- :func:`functional_entropy`: samples ``[..., S, ...]`` -> the same with ``dim`` reduced.
- :func:`modality_contribution_ratio`, :func:`amps_scale`: ``[B]`` -> ``[B]``.
- :func:`steering_vector`: ``h_pos [N_+, d]``, ``h_neg [N_-, d]`` -> ``v [d]``.
- :class:`ActivationSteerer`: ``vector [d]``, ``alpha`` scalar or ``[B]``, ``prompt_lengths [B]``; the
  steered layer output keeps its shape ``[B, L, d]``.
- :class:`AdaptiveScaleNet`: ``pooled_hidden [B, d_model]`` -> ``[B]``.
- :class:`AMPSSteerer`: ``inputs_embeds [B, L, d]``, ``attention_mask [B, L]`` -> pooled hidden ``[B, d]``,
  per-sample strengths ``[B]``; steered generation as ``model.generate``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from torch import nn

from neurips26.common.checks import check_choice, check_float, check_int

__all__ = [
    "functional_entropy",
    "modality_contributions",
    "modality_contribution_ratio",
    "steering_vector",
    "ActivationSteerer",
    "amps_scale",
    "AdaptiveScaleNet",
    "AMPSSteerer",
]


def functional_entropy(values: torch.Tensor, dim: int = -1, eps: float = 1e-12) -> torch.Tensor:
    """Monte-Carlo functional entropy of non-negative samples ``f_s`` along ``dim``.

    .. math:: \\mathrm{Ent}(f) = \\frac1S\\sum_s f_s \\log f_s - \\bar f \\log \\bar f \\;\\ge 0

    Parameters
    ----------
    values : Tensor
        Non-negative samples (S >= 2 along ``dim``).

    Returns
    -------
    Tensor with ``dim`` reduced, clamped at 0 (Jensen's inequality holds up to rounding).
    """
    if not isinstance(values, torch.Tensor):
        raise TypeError(f"values must be a tensor, got {type(values).__name__}")
    if values.is_meta:
        raise ValueError("values is a meta tensor (no data); pass a materialised tensor")
    check_int("dim", dim, -values.dim(), values.dim() - 1)
    check_float("eps", eps, 0.0, low_open=True)
    if not bool(torch.isfinite(values).all()):
        raise ValueError("values contains NaN or inf")
    if values.shape[dim] < 2:
        raise ValueError(
            f"functional_entropy needs at least 2 samples along dim {dim}, got {values.shape[dim]}"
        )
    if (values < 0).any():
        raise ValueError("values must be non-negative")
    v = values.double()
    flogf = torch.where(v > 0, v * torch.log(v.clamp_min(eps)), torch.zeros_like(v))
    mean = v.mean(dim)
    ent = flogf.mean(dim) - torch.where(
        mean > 0, mean * torch.log(mean.clamp_min(eps)), torch.zeros_like(mean)
    )
    return ent.clamp_min(0.0)


def modality_contributions(
    forward_fn: Callable[[torch.Tensor], torch.Tensor],
    inputs_embeds: torch.Tensor,
    modality_masks: dict[str, torch.Tensor],
    sigma_rel: float = 0.1,
    num_samples: int = 16,
    f: str = "prob",
    generator: torch.Generator | None = None,
    exclusive: bool = True,
) -> dict[str, torch.Tensor]:
    """Functional entropy of the answer under Gaussian perturbation of each modality's embeddings.

    Parameters
    ----------
    forward_fn : callable
        ``inputs_embeds (B, L, d) -> logits (B, V)`` of the answer position.
    inputs_embeds : Tensor, shape (B, L, d)
    modality_masks : dict name -> bool Tensor (B, L)
    sigma_rel : float
        Noise std relative to the RMS of the modality's embeddings (> 0).
    num_samples : int
        Monte-Carlo samples S (>= 2).
    f : {"prob", "kl"}
        Test function: probability of the unperturbed prediction, or KL(p_clean || p_perturbed).
    generator : torch.Generator, optional
        Fixes the noise (deterministic result).
    exclusive : bool
        Require the masks not to overlap.

    Returns
    -------
    dict name -> Tensor (B,), float64
    """
    check_float("sigma_rel", sigma_rel, 0.0, low_open=True)
    check_int("num_samples", num_samples, low=2)
    check_choice("f", f, ("prob", "kl"))
    if not isinstance(inputs_embeds, torch.Tensor):
        raise TypeError(f"inputs_embeds must be a torch.Tensor, got {type(inputs_embeds).__name__}")
    if inputs_embeds.is_meta:
        raise ValueError("inputs_embeds is a meta tensor (no data); pass a materialised tensor")
    if not inputs_embeds.is_floating_point():
        raise TypeError(f"inputs_embeds must be a floating-point tensor, got {inputs_embeds.dtype}")
    if inputs_embeds.dim() != 3 or inputs_embeds.shape[0] == 0:
        raise ValueError(f"inputs_embeds must be (B >= 1, L, d), got {tuple(inputs_embeds.shape)}")
    if not bool(torch.isfinite(inputs_embeds).all()):
        raise ValueError("inputs_embeds contains NaN or inf")
    B, L, _ = inputs_embeds.shape
    if not modality_masks:
        raise ValueError("modality_masks must not be empty")
    for name, m in modality_masks.items():
        if tuple(m.shape) != (B, L):
            raise ValueError(f"modality mask {name!r} must have shape ({B}, {L}), got {tuple(m.shape)}")
    if exclusive:
        total = sum(m.long() for m in modality_masks.values())
        if (total > 1).any():
            raise ValueError("modality masks overlap (exclusive=True)")
    with torch.no_grad():
        clean = torch.log_softmax(forward_fn(inputs_embeds).double(), -1)  # (B, V)
        if not bool(torch.isfinite(clean).all()):
            raise ValueError(
                "forward_fn returned NaN/inf logits for inputs_embeds (too large for the model?)"
            )
        pred = clean.argmax(-1)
        out = {}
        for name, m in modality_masks.items():
            mf = m.to(inputs_embeds.dtype)[..., None]
            count = mf.sum((1, 2)).clamp_min(1) * inputs_embeds.shape[-1]
            rms = ((inputs_embeds.pow(2) * mf).sum((1, 2)) / count).sqrt()  # (B,)
            samples = []
            for _ in range(num_samples):
                noise = torch.randn(inputs_embeds.shape, generator=generator, dtype=inputs_embeds.dtype)
                pert = inputs_embeds + sigma_rel * rms[:, None, None] * noise * mf
                logp = torch.log_softmax(forward_fn(pert).double(), -1)
                if not bool(torch.isfinite(logp).all()):
                    raise ValueError("forward_fn returned NaN/inf logits for perturbed inputs_embeds")
                if f == "prob":
                    samples.append(logp.gather(-1, pred[:, None])[:, 0].exp())
                else:
                    samples.append((clean.exp() * (clean - logp)).sum(-1).clamp_min(0))
            out[name] = functional_entropy(torch.stack(samples, -1))
    return out


def modality_contribution_ratio(contribs: dict[str, torch.Tensor], target: str) -> torch.Tensor:
    """:math:`\\mathrm{Ent}_{target} / \\sum_m \\mathrm{Ent}_m` in [0, 1] (0 when every entropy is 0)."""
    if target not in contribs:
        raise ValueError(f"target modality {target!r} not in {sorted(contribs)}")
    total = sum(contribs.values())
    return contribs[target] / (total + 1e-12)


def steering_vector(h_pos: torch.Tensor, h_neg: torch.Tensor, normalize: bool = True) -> torch.Tensor:
    """Difference of means :math:`v = \\bar h_{+} - \\bar h_{-}` of (N, d) hidden states (unit norm if asked)."""
    if h_pos.dim() != 2 or h_neg.dim() != 2 or h_pos.shape[1] != h_neg.shape[1]:
        raise ValueError(
            f"h_pos and h_neg must be (N, d) with one d, got {tuple(h_pos.shape)} and {tuple(h_neg.shape)}"
        )
    if h_pos.shape[0] == 0 or h_neg.shape[0] == 0:
        # the mean of zero rows is NaN, and 0 * NaN = NaN: even alpha = 0 would then wreck every answer
        raise ValueError(
            f"h_pos and h_neg need at least one row each, got {h_pos.shape[0]} and {h_neg.shape[0]} "
            "(no sample in one of the two groups)"
        )
    v = h_pos.mean(0) - h_neg.mean(0)
    return v / v.norm().clamp_min(1e-12) if normalize else v


class ActivationSteerer(contextlib.AbstractContextManager):
    """Add :math:`\\alpha_b v` to the output of ``model.model.layers[layer]`` (context manager).

    Parameters
    ----------
    model : transformers Llama-family model (``model.model.layers``)
    layer : int
    vector : Tensor, shape (d,)
    alpha : float or Tensor (B,)
        Non-negative strength, per row when a tensor.
    positions : {"generation", "all"}
        ``generation``: positions from the last prompt token onward (needs ``prompt_lengths`` (B,);
        decoding steps with a KV cache are always steered); ``all``: every position.
    """

    def __init__(
        self,
        model: nn.Module,
        layer: int,
        vector: torch.Tensor,
        alpha: float | torch.Tensor,
        positions: str = "generation",
        prompt_lengths: torch.Tensor | None = None,
    ):
        layers = model.model.layers
        check_int("layer", layer, 0, len(layers) - 1)
        check_choice("positions", positions, ("generation", "all"))
        if isinstance(alpha, torch.Tensor):
            if (alpha < 0).any():
                raise ValueError("alpha must be >= 0")
        else:
            check_float("alpha", alpha, 0.0)
        if positions == "generation" and prompt_lengths is None:
            raise ValueError("positions='generation' needs prompt_lengths (B,)")
        self.block, self.vector, self.alpha = layers[layer], vector, alpha
        self.positions, self.prompt_lengths, self.handle = positions, prompt_lengths, None

    def _hook(self, _module, _args, output):
        hidden = output[0] if isinstance(output, tuple) else output
        B, L, _ = hidden.shape
        alpha = self.alpha if isinstance(self.alpha, torch.Tensor) else torch.full((B,), float(self.alpha))
        add = alpha.to(hidden.dtype)[:, None, None] * self.vector.to(hidden.dtype)[None, None, :]
        if self.positions == "generation" and L > 1:
            pos = torch.arange(L)[None, :]
            keep = (pos >= (self.prompt_lengths[:, None] - 1)).to(hidden.dtype)[..., None]
            add = add * keep
        hidden = hidden + add
        return (hidden, *output[1:]) if isinstance(output, tuple) else hidden

    def __enter__(self) -> ActivationSteerer:
        self.handle = self.block.register_forward_hook(self._hook)
        return self

    def __exit__(self, *exc) -> None:
        if self.handle is not None:
            self.handle.remove()
            self.handle = None


def amps_scale(
    mcr_target: torch.Tensor, alpha_max: float, gamma: float = 1.0, scaling: str = "mcr_deficit"
) -> torch.Tensor:
    """Per-sample steering strength from the target modality's MCR.

    ``mcr_deficit``: :math:`\\alpha_{max}(1 - \\mathrm{MCR})^{\\gamma}` (non-increasing in MCR);
    ``mcr_balance``: :math:`\\alpha_{max}|2\\,\\mathrm{MCR} - 1|^{\\gamma}` (ablation).
    """
    check_float("alpha_max", alpha_max, 0.0)
    check_float("gamma", gamma, 0.0, low_open=True)
    check_choice("scaling", scaling, ("mcr_deficit", "mcr_balance"))
    m = mcr_target.double().clamp(0, 1)
    base = (1 - m) if scaling == "mcr_deficit" else (2 * m - 1).abs()
    return alpha_max * base.pow(gamma)


class AdaptiveScaleNet(nn.Module):
    """Learned scale :math:`g_\\phi(h) = \\alpha_{max}\\,\\sigma(\\mathrm{MLP}(h)) \\in [0, \\alpha_{max}]`.

    Shapes
    ------
    ``pooled_hidden``: ``[B, d_model]`` -> ``[B]``; :meth:`fit` also takes ``alpha_targets`` ``[B]``.
    """

    def __init__(self, d_model: int, alpha_max: float, hidden: int = 64):
        super().__init__()
        check_int("d_model", d_model, low=1)
        check_int("hidden", hidden, low=1)
        self.alpha_max = check_float("alpha_max", alpha_max, 0.0)
        self.net = nn.Sequential(nn.Linear(d_model, hidden), nn.GELU(), nn.Linear(hidden, 1))

    def forward(self, pooled_hidden: torch.Tensor) -> torch.Tensor:
        return self.alpha_max * torch.sigmoid(self.net(pooled_hidden.float()))[..., 0]

    def fit(
        self,
        pooled_hidden: torch.Tensor,
        alpha_targets: torch.Tensor,
        steps: int = 500,
        lr: float = 1e-3,
        seed: int = 0,
    ) -> list[float]:
        """Distil MCR-derived strengths (MSE); full-batch Adam, seeded."""
        check_int("steps", steps, low=1)
        check_float("lr", lr, 0.0, low_open=True)
        torch.manual_seed(seed)
        opt = torch.optim.Adam(self.parameters(), lr=lr)
        x, y = pooled_hidden.detach().float(), alpha_targets.detach().float()
        losses = []
        for _ in range(steps):
            loss = torch.nn.functional.mse_loss(self(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        return losses


class AMPSSteerer:
    """AMPS at inference: read the pooled hidden state, predict each sample's strength, steer.

    One unsteered forward reads the output of ``model.model.layers[layer]`` at the last prompt token
    (the point the steering vector is added to); the learned :class:`AdaptiveScaleNet` maps it to
    :math:`\\alpha_b \\in [0, \\alpha_{max}]`, so the Monte-Carlo MCR diagnostic is not run at inference;
    the steered pass adds :math:`\\alpha_b v` through :class:`ActivationSteerer`.

    Parameters
    ----------
    model : transformers Llama-family model (``model.model.layers``)
    layer : int
    vector : Tensor, shape (d,)
    scale_net : AdaptiveScaleNet
        Trained module (``scale_net.alpha_max`` is its own range).
    positions : {"generation", "all"}
    """

    def __init__(
        self, model: nn.Module, layer: int, vector: torch.Tensor, scale_net: AdaptiveScaleNet,
        positions: str = "generation",
    ):
        check_int("layer", layer, 0, len(model.model.layers) - 1)
        check_choice("positions", positions, ("generation", "all"))
        if not isinstance(scale_net, AdaptiveScaleNet):
            raise TypeError(f"scale_net must be an AdaptiveScaleNet, got {type(scale_net).__name__}")
        self.model, self.layer, self.vector, self.scale_net, self.positions = (
            model, layer, vector, scale_net, positions,
        )

    def pooled_hidden(
        self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor | None = None,
        prompt_lengths: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Unsteered output of the steered block at the last prompt token, ``[B, d]`` (detached).

        ``prompt_lengths`` ``[B]``: the last prompt token of row b is ``prompt_lengths[b] - 1``;
        default the last position (left-padded prompts).
        """
        got = {}

        def hook(_module, _args, output):
            got["h"] = (output[0] if isinstance(output, tuple) else output).detach()

        handle = self.model.model.layers[self.layer].register_forward_hook(hook)
        try:
            with torch.no_grad():
                self.model(inputs_embeds=inputs_embeds, attention_mask=attention_mask)
        finally:
            handle.remove()
        h = got["h"]
        if prompt_lengths is None:
            return h[:, -1]
        return h[torch.arange(h.shape[0]), prompt_lengths.long() - 1]

    def alphas(
        self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor | None = None,
        alpha_max: float | None = None, prompt_lengths: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Per-sample strengths ``[B]`` from the module, rescaled to ``[0, alpha_max]`` when given."""
        with torch.no_grad():
            a = self.scale_net(self.pooled_hidden(inputs_embeds, attention_mask, prompt_lengths))
        if alpha_max is None:
            return a
        check_float("alpha_max", alpha_max, 0.0)
        if self.scale_net.alpha_max == 0:
            return torch.zeros_like(a)
        return a * (alpha_max / self.scale_net.alpha_max)

    def steering(self, alphas: torch.Tensor | float, prompt_lengths: torch.Tensor | None = None) -> ActivationSteerer:
        """The steering hook with per-sample ``alphas`` (context manager)."""
        return ActivationSteerer(
            self.model, self.layer, self.vector, alphas, positions=self.positions, prompt_lengths=prompt_lengths
        )

    def generate(
        self, model: nn.Module | None = None, inputs_embeds: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None, alpha_max: float | None = None, **gen_kwargs,
    ):
        """Read the hidden state, predict ``alpha_b`` and ``model.generate`` under the steering hook."""
        model = self.model if model is None else model
        if model is not self.model:
            raise ValueError("generate must use the model the steerer hooks")
        if inputs_embeds is None:
            raise ValueError("generate needs inputs_embeds (B, L, d)")
        a = self.alphas(inputs_embeds, attention_mask, alpha_max)
        lens = torch.full((inputs_embeds.shape[0],), inputs_embeds.shape[1])
        with self.steering(a, lens):
            return model.generate(inputs_embeds=inputs_embeds, attention_mask=attention_mask, **gen_kwargs)
