r"""FedRevive: asynchronous FL that revives stale updates with server-side data-free distillation.

Paper
-----
*FedRevive* (NeurIPS 2026; seed file ``000_f8b4140a0e3b5d84.txt``, paragraph 13, abstract
beginning "Federated learning (FL) enables collaborative model"; arXiv 2511.00655).

Math
----
Asynchronous system model: client ``i`` receives the global model ``w^(v)`` (version ``v``), trains
locally and returns ``Delta_i = w_i - w^(v)``; the server is at version ``t`` when it arrives, so the
update is ``tau_i = t - v`` versions stale. Job durations are LogNormal(``mu_i``, ``sigma``) per
client (:class:`ClientSpeedModel`); :class:`AsyncSimulator` replays the resulting event order on a
simulated clock, through a *transport* that either trains in-process or sends Flower messages
(:class:`neurips26.federated.fedrevive.flower.GridTransport`), so the runner exists once.

Server rules (all :class:`AsyncStrategy`):

* :class:`FedAsync` -- ``w <- (1 - a_t) w + a_t (w^(v) + Delta)``, ``a_t = alpha * s(tau)``.
* :class:`FedBuff` -- buffer ``K`` updates, then
  ``w <- w + eta_g Delta_raw``, ``Delta_raw = sum_i p_i s(tau_i) Delta_i / sum_i p_i s(tau_i)``,
  ``p_i ~ n_i``, staleness weight ``s(tau) = (1 + tau)^(-a)``.
* :class:`FedRevive` -- FedBuff plus data-free distillation: teachers ``theta_i = w^(v_i) + Delta_i``
  (versions kept for a window of ``W``), a meta-learned conditional generator ``G_phi(z, y)``
  (Reptile: ``k`` inner Adam steps on
  ``L_G = CE(ens(x), y) + lambda_bn * L_BN - lambda_adv * KL(ens/T || student/T)``, then
  ``phi <- phi + epsilon (phi' - phi)``), multi-teacher KD of the current model for ``S`` steps on
  ``T^2 KL(softmax(sum_i pi_i z_i / T) || softmax(z_s / T))`` giving ``Delta_KD``, and the hybrid step
  ``w <- w + eta_g [(1 - beta_bar) Delta_raw + beta_bar Delta_KD]`` with revival weight
  ``beta(tau) = beta_max (1 - (1 + tau)^(-b))`` averaged over the buffer (``p_i`` weights). With
  every ``tau = 0``, ``beta_bar = 0``: the step is FedBuff's, bit for bit.
* :class:`SyncFedAvg` -- synchronous FedAvg reference: waits for all dispatched clients.

The FedRevive server step in one line:

.. math::
    w \leftarrow w + \eta_g\big[(1 - \bar\beta)\,\Delta_{raw} + \bar\beta\,\Delta_{KD}\big],\qquad
    \bar\beta = \frac{\sum_i p_i\,\beta(\tau_i)}{\sum_i p_i},\qquad
    \beta(\tau) = \beta_{max}\big(1 - (1 + \tau)^{-b}\big)

No server-side data: :meth:`FedRevive.distill` takes models, weights and the generator only.
This module never imports Flower.

Shapes
------
- Models are classifiers: inputs ``[B, *input_shape]`` -> logits ``[B, num_classes]``.
- :class:`ConditionalGenerator`: noise ``z [B, z_dim]`` and labels ``y [B]`` ->
  samples ``[B, *out_shape]`` in ``[0, 1]``.
- :class:`ClientUpdate`: ``delta`` holds one tensor per floating-point entry of the
  model's ``state_dict`` (same shapes).

Modules
-------
- :mod:`.updates`: :func:`staleness_weight`, :func:`revival_weight`, :class:`ClientUpdate`,
  :class:`ClientSpeedModel`.
- :mod:`.strategies`: :class:`AsyncStrategy`, :class:`FedAsync`, :class:`FedBuff`, :class:`SyncFedAvg`.
- :mod:`.generator`: :class:`ConditionalGenerator`.
- :mod:`.revive`: :class:`FedRevive`.
- :mod:`.simulate`: :class:`Transport`, :class:`LocalTransport`, :class:`History`, :func:`time_to_target`,
  :class:`AsyncSimulator`.
- :mod:`.flower`: the Flower wiring (``AsyncFedAvg``, ``GridTransport``, ``run_async``); not imported
  here, so importing this package does not import Flower.
"""

from neurips26.federated.fedrevive.generator import ConditionalGenerator
from neurips26.federated.fedrevive.revive import FedRevive
from neurips26.federated.fedrevive.simulate import AsyncSimulator, History, LocalTransport, time_to_target
from neurips26.federated.fedrevive.strategies import AsyncStrategy, FedAsync, FedBuff, SyncFedAvg
from neurips26.federated.fedrevive.updates import (
    ClientSpeedModel,
    ClientUpdate,
    revival_weight,
    staleness_weight,
)

__all__ = [
    "AsyncSimulator",
    "AsyncStrategy",
    "ClientSpeedModel",
    "ClientUpdate",
    "ConditionalGenerator",
    "FedAsync",
    "FedBuff",
    "FedRevive",
    "History",
    "LocalTransport",
    "SyncFedAvg",
    "revival_weight",
    "staleness_weight",
    "time_to_target",
]
