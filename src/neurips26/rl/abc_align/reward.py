"""The reward-model path of ABC-Align: a Bradley-Terry loss usable inside any trainer, and a minimal trainer.

:func:`abc_reward_loss` takes the chosen/rejected rewards of a mixed batch (TRL ``RewardTrainer``'s
``rewards_chosen``, ``rewards_rejected``) plus per-pair labels and applies an objective from
:mod:`.objective`; overriding ``RewardTrainer.compute_loss`` with it is enough to train a TRL reward
model with ABC-Align (see the function's example).

:class:`ABCRewardTrainer` trains any ``nn.Module`` reward model on tensor pairs, drawing every step
``human_batch`` human and ``pseudo_batch`` pseudo pairs, observing per-example probe gradients
(computed with ``torch.func.vmap(grad)``) and re-estimating the correction every ``update_every``
steps. It can also train ``R`` reward models in lockstep (an ensemble module whose output is
``(R, B)``, one objective per replica), so that several arms see exactly the same mini-batches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from neurips26.common.checks import check_float, check_int
from neurips26.rl.abc_align.objective import (
    PROBES,
    MarginBatch,
    RectifiedObjective,
    _check_labels,
    _check_real,
    _soft_logistic,
    rectified_loss_from_margins,
)


def abc_reward_loss(
    rewards_chosen: torch.Tensor,
    rewards_rejected: torch.Tensor,
    is_human: torch.Tensor,
    human_labels: torch.Tensor,
    pseudo_labels: torch.Tensor,
    objective: RectifiedObjective,
) -> torch.Tensor:
    """ABC-Align (or any rectified objective) on a Bradley-Terry reward model's mixed batch.

    The margin of pair ``i`` is ``r_i^chosen - r_i^rejected``; ``human_labels[i]`` /
    ``pseudo_labels[i]`` are the human / judge probability that *chosen* is better (1.0 for a hard
    label; pseudo pairs' human label is ignored).

    Parameters
    ----------
    rewards_chosen, rewards_rejected : Tensor ``(B,)``
    is_human : Tensor ``(B,)`` bool
    human_labels, pseudo_labels : Tensor ``(B,)`` in [0, 1]
    objective : RectifiedObjective
        e.g. :class:`~neurips26.rl.abc_align.ABCAlignObjective`.

    Returns
    -------
    Tensor ``()``

    Examples
    --------
    Inside TRL's ``RewardTrainer`` (``"abc_is_human"`` etc. are extra dataset columns kept through the
    collator)::

        class MyRewardTrainer(trl.RewardTrainer):
            def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
                extra = {k: inputs.pop(k) for k in ("abc_is_human", "abc_label", "abc_pseudo_label")}
                rewards = model(**inputs).logits.squeeze(-1)
                chosen, rejected = rewards.chunk(2)
                return abc_reward_loss(chosen, rejected, extra["abc_is_human"].bool(),
                                       extra["abc_label"], extra["abc_pseudo_label"], self.objective)
    """
    for name, t in (("rewards_chosen", rewards_chosen), ("rewards_rejected", rewards_rejected)):
        _check_real(name, t, ndim=1)
    if rewards_chosen.device != rewards_rejected.device:
        raise ValueError("rewards_chosen and rewards_rejected must share a device")
    if rewards_chosen.shape != rewards_rejected.shape:
        raise ValueError(
            f"rewards_chosen {tuple(rewards_chosen.shape)} and rewards_rejected "
            f"{tuple(rewards_rejected.shape)} must match"
        )
    loss, _ = rectified_loss_from_margins(
        rewards_chosen - rewards_rejected, human_labels, pseudo_labels, is_human, objective
    )
    return loss


@dataclass
class PreferencePairs:
    """Preference pairs as tensors: response 1 inputs, response 2 inputs and labels.

    Parameters
    ----------
    first, second : Tensor ``(P, ...)``
        Reward-model inputs of the two responses (prompt features included if the model needs them).
    label : Tensor ``(P,)`` or ``(R, P)``
        Probability that ``first`` is preferred: the human label on the human set, the judge label
        on the pseudo pool. ``(R, P)`` gives each lockstep replica its own labels.
    pseudo_label : Tensor ``(P,)`` or ``(R, P)``, optional
        Judge label of a human pair (required for the human set).
    """

    first: torch.Tensor
    second: torch.Tensor
    label: torch.Tensor
    pseudo_label: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.first.shape != self.second.shape:
            raise ValueError(
                f"first {tuple(self.first.shape)} and second {tuple(self.second.shape)} must match"
            )
        size = self.first.shape[0]
        for name in ("label", "pseudo_label"):
            value = getattr(self, name)
            if value is None:
                continue
            if value.shape[-1] != size or value.ndim not in (1, 2):
                raise ValueError(
                    f"{name} must have shape (P,) or (R, P) with P = {size} pairs, got {tuple(value.shape)}"
                )
            _check_labels(name, value)

    def __len__(self) -> int:
        return self.first.shape[0]


def _labels(value: torch.Tensor, idx: torch.Tensor, replicas: int) -> torch.Tensor:
    out = value[..., idx].float()
    if out.ndim == 1:
        out = out.unsqueeze(0).expand(replicas, -1)
    if out.shape[0] != replicas:
        raise ValueError(f"labels have {out.shape[0]} replicas, the model has {replicas}")
    return out


def head_parameter_names(model: nn.Module) -> list[str]:
    """Names of the output head's parameters: LoRA ``B`` matrices if any, else the last weight (and bias).

    The "head" probe of the spec: the final scalar head of a reward model, the LM output head, or a
    model's LoRA ``B`` matrices.
    """
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    lora_b = [n for n in names if "lora_B" in n]
    if lora_b:
        return lora_b
    weights = [n for n in names if n.endswith("weight")]
    if not weights:
        raise ValueError("model has no trainable weight to probe")
    last = weights[-1]
    prefix = last[: -len("weight")]
    return [n for n in names if n in (last, prefix + "bias")]


def per_example_margin_grads(
    model: nn.Module,
    probe_names: Sequence[str],
    first: torch.Tensor,
    second: torch.Tensor,
    replicas: int = 1,
) -> torch.Tensor:
    """Per-example gradients ``∇ψ m_i`` of reward margins on the probe parameters, with ``vmap(grad)``.

    For an ensemble of ``R`` replicas every probe parameter must carry the replica on its first
    axis; margins of different replicas depend on disjoint slices, so the gradient of the sum over
    replicas, taken per example, holds every replica's own gradient.

    Shapes: ``first``, ``second`` ``(B, ...)`` -> ``(R, B, dim)`` with ``dim`` the probe size per
    replica.
    """
    from torch.func import functional_call, grad, vmap

    params = dict(model.named_parameters())
    missing = [n for n in probe_names if n not in params]
    if missing:
        raise ValueError(f"probe parameters not found in the model: {missing}")
    probe = {n: params[n].detach() for n in probe_names}
    rest = {n: p.detach() for n, p in params.items() if n not in probe}
    buffers = dict(model.named_buffers())

    def margin_sum(p, a, b):
        state = {**rest, **p, **buffers}
        out = functional_call(model, state, (a.unsqueeze(0),)) - functional_call(
            model, state, (b.unsqueeze(0),)
        )
        return out.sum()

    grads = vmap(grad(margin_sum), in_dims=(None, 0, 0))(probe, first, second)
    blocks = []
    for n in probe_names:
        g = grads[n]  # (B, *shape)
        if replicas > 1:
            if g.ndim < 2 or g.shape[1] != replicas:
                raise ValueError(f"probe parameter {n} must have the replica axis ({replicas}) first")
            blocks.append(g.transpose(0, 1).reshape(replicas, g.shape[0], -1))
        else:
            blocks.append(g.reshape(1, g.shape[0], -1))
    return torch.cat(blocks, -1)


class ABCRewardTrainer:
    """Minimal trainer for reward models with ABC-Align or a baseline objective (any ``nn.Module``).

    Every step draws ``human_batch`` human and ``pseudo_batch`` pseudo pairs (fresh permutations,
    seeded), computes margins ``r(first) - r(second)``, combines per-example soft-logistic losses
    with each objective, takes one optimiser step, observes per-example probe gradients for the
    objectives that need them, and every ``update_every`` steps re-estimates their strength.

    Parameters
    ----------
    model : nn.Module
        ``model(x) -> (B,)`` rewards, or ``(R, B)`` for ``R`` replicas trained in lockstep.
    objectives : RectifiedObjective or sequence of R of them
        One per replica.
    human, pseudo : PreferencePairs
        The human set (``label`` = human label, ``pseudo_label`` = judge label) and the pseudo pool
        (``label`` = judge label).
    lr : float
        Adam learning rate.
    human_batch, pseudo_batch : int
        Pairs per step from each set (capped at the set sizes).
    update_every : int
        Steps between strength re-estimates.
    probe : {"head", "all"}, list of parameter names, or callable
        Parameters of the gradient-space statistics (per-example gradients by ``vmap(grad)``), or a
        function ``probe(first, second) -> (R, B, dim)`` returning per-example margin gradients in
        closed form (e.g. penultimate-feature differences for a linear head, much faster).
    seed : int
        Seeds the mini-batch draws.
    observe : {"update", "batch"}
        ``"update"`` (default): at every re-estimate, compute the per-example statistics at the
        current parameters on the whole human set (or ``window`` random human pairs if larger) and
        ``window`` pseudo pairs. ``"batch"``: observe every mini-batch as it is trained on (the
        sliding window of the spec; what :class:`ABCDPOTrainer` does).
    window : int
        Examples per re-estimate in ``observe="update"`` mode.
    """

    def __init__(
        self,
        model: nn.Module,
        objectives: RectifiedObjective | Sequence[RectifiedObjective],
        human: PreferencePairs,
        pseudo: PreferencePairs,
        *,
        lr: float = 1e-3,
        human_batch: int = 16,
        pseudo_batch: int = 64,
        update_every: int = 10,
        probe: str | Sequence[str] | Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = "head",
        seed: int = 0,
        observe: str = "update",
        window: int = 256,
    ) -> None:
        self.model = model
        self.objectives = [objectives] if isinstance(objectives, RectifiedObjective) else list(objectives)
        if not self.objectives or not all(isinstance(o, RectifiedObjective) for o in self.objectives):
            raise TypeError("objectives must be a RectifiedObjective or a non-empty sequence of them")
        if len(human) == 0:
            raise ValueError("the human set is empty")
        if len(pseudo) == 0:
            raise ValueError("the pseudo pool is empty")
        if human.pseudo_label is None:
            raise ValueError("the human set needs pseudo_label (the judge's label of each human pair)")
        self.human, self.pseudo = human, pseudo
        check_float("lr", lr, 0.0, low_open=True)
        self.human_batch = min(check_int("human_batch", human_batch, low=1), len(human))
        self.pseudo_batch = min(check_int("pseudo_batch", pseudo_batch, low=1), len(pseudo))
        self.update_every = check_int("update_every", update_every, low=1)
        if observe not in ("update", "batch"):
            raise ValueError(f"observe must be 'update' or 'batch', got {observe!r}")
        self.observe = observe
        self.window = check_int("window", window, low=2)
        self.probe_fn = probe if callable(probe) else None
        if callable(probe):
            self.probe_names = []
        elif isinstance(probe, str):
            if probe not in PROBES:
                raise ValueError(
                    f"probe must be one of {list(PROBES)} or a list of parameter names, got {probe!r}"
                )
            names = [n for n, p in model.named_parameters() if p.requires_grad]
            self.probe_names = head_parameter_names(model) if probe == "head" else names
        else:
            self.probe_names = list(probe)
        # foreach: one fused update for all parameters (the per-tensor loop's update within float32 rounding,
        # tested; bit for bit on the developers' Xeon, not promised on every CPU), fewer ops
        self.optimizer = torch.optim.Adam(
            [p for p in model.parameters() if p.requires_grad], lr=lr, foreach=True
        )
        self.generator = torch.Generator().manual_seed(check_int("seed", seed, low=0))
        self.replicas = len(self.objectives)
        self.needs = set().union(*(set(o.needs) for o in self.objectives))
        self.needs_margins = any(o.needs or getattr(o, "space", "grad") == "loss" for o in self.objectives)
        self.step_count = 0
        self._perm = {"human": torch.empty(0, dtype=torch.long), "pseudo": torch.empty(0, dtype=torch.long)}
        self._pos = {"human": 0, "pseudo": 0}

    def _draw(self, which: str, size: int, total: int) -> torch.Tensor:
        if self._pos[which] + size > self._perm[which].numel():
            self._perm[which] = torch.randperm(total, generator=self.generator)
            self._pos[which] = 0
        idx = self._perm[which][self._pos[which] : self._pos[which] + size]
        self._pos[which] += size
        return idx

    def _margins(self, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
        out = self.model(first) - self.model(second)
        if out.ndim == 1:
            out = out.unsqueeze(0)
        if out.shape[0] != self.replicas:
            raise ValueError(
                f"the model returns {out.shape[0]} replicas, but {self.replicas} objectives were given"
            )
        return out

    def _probe_grads(self, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
        with torch.no_grad() if self.probe_fn is not None else torch.enable_grad():
            if self.probe_fn is not None:
                out = self.probe_fn(first, second)
            else:
                out = per_example_margin_grads(self.model, self.probe_names, first, second, self.replicas)
        if out.ndim == 2:
            out = out.unsqueeze(0)
        if out.ndim != 3 or out.shape[:2] != (self.replicas, first.shape[0]):
            raise ValueError(
                f"probe gradients must have shape (R, B, dim) = ({self.replicas}, {first.shape[0]}, dim)"
            )
        return out.detach()

    def _observe(self, hi, pi, m_h, m_p, h_true, h_pseudo, p_label, first, second) -> None:
        batch = MarginBatch(m_h, h_true, h_pseudo, m_p, p_label, human_ids=hi, pseudo_ids=pi)
        if self.needs:
            k = hi.numel() if "pseudo" in self.needs else hi.numel()
            grads = (
                self._probe_grads(first, second)
                if "pseudo" in self.needs
                else self._probe_grads(first[:k], second[:k])
            )
            batch.human_grads = grads[:, : hi.numel()]
            if "pseudo" in self.needs:
                batch.pseudo_grads = grads[:, hi.numel() :]
        for r, obj in enumerate(self.objectives):
            obj.observe_batch(batch, r)

    @torch.no_grad()
    def _observe_window(self) -> None:
        """Statistics at the current parameters on (up to ``window``) human and pseudo pairs."""
        R = self.replicas
        n, N = len(self.human), len(self.pseudo)
        hi = (
            torch.arange(n)
            if n <= self.window
            else torch.randperm(n, generator=self.generator)[: self.window]
        )
        pi = torch.randperm(N, generator=self.generator)[: min(N, self.window)]
        first = torch.cat([self.human.first[hi], self.pseudo.first[pi]], 0)
        second = torch.cat([self.human.second[hi], self.pseudo.second[pi]], 0)
        margins = self._margins(first, second)
        self._observe(
            hi,
            pi,
            margins[:, : hi.numel()],
            margins[:, hi.numel() :],
            _labels(self.human.label, hi, R),
            _labels(self.human.pseudo_label, hi, R),
            _labels(self.pseudo.label, pi, R),
            first,
            second,
        )

    def step(self) -> dict[str, float]:
        """One optimiser step; returns the per-replica losses and strengths."""
        hi = self._draw("human", self.human_batch, len(self.human))
        pi = self._draw("pseudo", self.pseudo_batch, len(self.pseudo))
        R = self.replicas
        h_true = _labels(self.human.label, hi, R)
        h_pseudo = _labels(self.human.pseudo_label, hi, R)
        p_label = _labels(self.pseudo.label, pi, R)
        first = torch.cat([self.human.first[hi], self.pseudo.first[pi]], 0)
        second = torch.cat([self.human.second[hi], self.pseudo.second[pi]], 0)
        margins = self._margins(first, second)
        m_h, m_p = margins[:, : hi.numel()], margins[:, hi.numel() :]
        # every objective is sum_j w_j * mean(loss_j); all replicas at once keeps the graph small
        means = torch.stack(
            [
                _soft_logistic(m_p, p_label).mean(1),
                _soft_logistic(m_h, h_true).mean(1),
                _soft_logistic(m_h, h_pseudo).mean(1),
            ],
            1,
        )  # (R, 3)
        weights = torch.tensor([obj.weights() for obj in self.objectives], dtype=means.dtype)
        losses = (weights * means).sum(1)
        total = losses.sum()
        self.optimizer.zero_grad(set_to_none=True)
        total.backward()
        self.optimizer.step()
        self.step_count += 1
        if self.needs_margins:
            if self.observe == "batch":
                self._observe(hi, pi, m_h.detach(), m_p.detach(), h_true, h_pseudo, p_label, first, second)
            if self.step_count % self.update_every == 0:
                if self.observe == "update":
                    self._observe_window()
                for obj in self.objectives:
                    obj.update_correction()
        out = {f"loss/{r}": float(v) for r, v in enumerate(losses.detach())}
        for r, obj in enumerate(self.objectives):
            strength = getattr(obj, "c", None)
            if strength is not None:
                out[f"strength/{r}"] = float(strength)
        return out

    def train(self, steps: int, log_every: int = 0) -> list[dict[str, float]]:
        """Run ``steps`` steps; return the step logs (every ``log_every`` steps, or none if 0)."""
        check_int("steps", steps, low=0)
        history = []
        self.model.train()
        for i in range(steps):
            log = self.step()
            if log_every and (i + 1) % log_every == 0:
                history.append({"step": float(self.step_count), **log})
        return history


__all__ = [
    "ABCRewardTrainer",
    "PreferencePairs",
    "abc_reward_loss",
    "head_parameter_names",
    "per_example_margin_grads",
]
