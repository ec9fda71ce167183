"""``WarehouseConsolidationEnv``: a Gymnasium simulator of warehouse consolidation with variable candidate sets.

Written for the library (the paper's simulator is not public). A grid of ``L`` storage locations lies
in ``n_zones`` zones at increasing distance from the dock; each location holds one SKU, up to
``capacity`` units, or is empty. Every epoch:

1. **Moves** (the agent): up to ``budget`` consolidation moves, executed in the given order. A move
   ``s -> t`` pours all units of location ``s`` into location ``t`` holding the same SKU with enough
   room, which empties ``s``. A move invalidated by an earlier one in the same epoch is skipped.
   Travel time is ``|d_s - d_t| + 1``.
2. **Demand**: each SKU ``k`` loses ``Poisson(λ_k)`` units, picked from its fullest location first.
3. **Inbound**: ``Poisson(rate_t)`` pallets arrive (one SKU, 3..capacity units each, rate following
   a known seasonal wave). Each needs an empty location; the putaway crew stores it in the nearest
   empty location and spends ``d`` time units; pallets beyond the crew's time budget per epoch or
   with no empty location are **rejected** (lost throughput).

Rewards (``objective``):

- ``"source"`` (the logged proxy): locations emptied by this epoch's moves.
- ``"target"`` (the new domain): ``3 × (emptied in the near-dock zone) + (emptied elsewhere)
  - 0.05 × travel``.

True throughput (``info["throughput"]``): inbound units stored / inbound units arrived so far.

Why the greedy heuristic leaves room (by construction): it scores moves by freed locations per
travel time, so it prefers short moves wherever they are, while throughput depends on empty
locations *near the dock* (putaway time is limited) and on having them *before* inbound waves; a
zone-aware, forecast-aware policy can do better.

Spaces
------
Observation ``Dict``:

- ``global``: ``Box(0, 1, (8,))``: empty fraction overall and per zone (4), inbound forecast for the
  next epoch and the next three epochs (as fractions of ``L``), fraction of the horizon left.
- ``candidates``: ``Box(-1, 1, (max_candidates, 8))``, a **masked Box**: rows are feasible moves
  ``[q_s, q_t, d_s, d_t, d_s - d_t, q_s + q_t, λ_sku, near_s]`` (normalised), padded with zeros.
- ``mask``: ``MultiBinary(max_candidates)``: 1 on the rows that are real candidates.

Action: ``MultiDiscrete([max_candidates + 1] * budget)``: an ordered list of candidate rows; the
value ``max_candidates`` means "no move". Gymnasium's ``check_env`` steps actions sampled
uniformly from the action space before a reset, so the registered default ``invalid_action="skip"``
skips entries that are not candidates and reports them in ``info["invalid"]``;
``invalid_action="raise"`` turns them into a ``ValueError`` (the library's collectors and
evaluators use it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from neurips26.common.checks import check_int
from neurips26.common.optional import require

gym = require("gymnasium", "envs")
spaces = gym.spaces

ENV_ID = "neurips26/WarehouseConsolidation-v0"
G_DIM = 8
F_DIM = 8
OBJECTIVES = ("source", "target")
NEAR_WEIGHT = 3.0
TRAVEL_COST = 0.05


class WarehouseConsolidationEnv(gym.Env):
    """Warehouse consolidation with a variable set of candidate moves per epoch (Gymnasium API).

    Parameters
    ----------
    n_locations : int
        Storage locations ``L`` (>= 8).
    n_skus : int
        Distinct SKUs ``S`` (>= 1).
    budget : int
        Moves per epoch ``B`` (labour budget, >= 1).
    max_candidates : int
        Rows of the candidate Box; feasible moves beyond it are dropped (the ones freeing the least
        full sources are kept).
    objective : {"source", "target"}
        Which reward ``step`` returns (both are always in ``info``).
    horizon : int
        Epochs per episode.
    capacity : int
        Units per location.
    n_zones : int
        Distance zones (zone 0 is next to the dock).
    invalid_action : {"skip", "raise"}
        What an action entry that is not a candidate does.
    putaway_time : float, optional
        Putaway crew time per epoch; default ``L / 10``.
    seed : int, optional
        Seeds the layout and dynamics at the first ``reset`` without a seed.

    Shapes
    ------
    observation ``{"global": (8,), "candidates": (max_candidates, 8), "mask": (max_candidates,)}``;
    action ``(budget,)``.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        n_locations: int = 200,
        n_skus: int = 40,
        budget: int = 5,
        max_candidates: int = 512,
        objective: str = "source",
        horizon: int = 40,
        capacity: int = 10,
        n_zones: int = 4,
        invalid_action: str = "skip",
        putaway_time: float | None = None,
        seed: int | None = None,
        render_mode: str | None = None,
    ) -> None:
        for name, value, low in (
            ("n_locations", n_locations, 8),
            ("n_skus", n_skus, 1),
            ("budget", budget, 1),
            ("max_candidates", max_candidates, 1),
            ("horizon", horizon, 1),
            ("capacity", capacity, 2),
            ("n_zones", n_zones, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {list(OBJECTIVES)}, got {objective!r}")
        if invalid_action not in ("skip", "raise"):
            raise ValueError(f"invalid_action must be 'skip' or 'raise', got {invalid_action!r}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.L, self.S, self.B, self.C = n_locations, n_skus, budget, max_candidates
        self.objective, self.horizon, self.capacity, self.n_zones = objective, horizon, capacity, n_zones
        self.invalid_action, self.render_mode = invalid_action, render_mode
        self.putaway_time = float(putaway_time) if putaway_time is not None else n_locations / 10.0
        self._seed = seed
        self.distance = 1.0 + 9.0 * np.arange(self.L) / (self.L - 1)
        self.zone = np.minimum((np.arange(self.L) * n_zones) // self.L, n_zones - 1)
        self.observation_space = spaces.Dict(
            {
                "global": spaces.Box(0.0, 1.0, (G_DIM,), np.float32),
                "candidates": spaces.Box(-1.0, 1.0, (self.C, F_DIM), np.float32),
                "mask": spaces.MultiBinary(self.C),
            }
        )
        self.action_space = spaces.MultiDiscrete(np.full(self.B, self.C + 1, dtype=np.int64))
        self._moves = np.zeros((0, 2), dtype=np.int64)

    # ------------------------------------------------------------------ dynamics
    def _inbound_rate(self, t: int) -> float:
        """Expected pallets at epoch ``t``: a seasonal wave (period 10) around ``L / 25``."""
        return self.base_inbound * (1.0 + 0.8 * np.sin(2 * np.pi * (t + self.phase) / 10.0))

    def _candidates(self) -> np.ndarray:
        """Feasible moves ``(n, 2)`` (source, target), same SKU and enough room, capped at ``C``."""
        occupied = np.flatnonzero(self.sku >= 0)
        by_sku: dict[int, list[int]] = {}
        for loc in occupied:
            by_sku.setdefault(int(self.sku[loc]), []).append(int(loc))
        moves = []
        for locs in by_sku.values():
            if len(locs) < 2:
                continue
            arr = np.asarray(locs)
            q = self.qty[arr]
            ok = (q[:, None] + q[None, :] <= self.capacity) & ~np.eye(len(arr), dtype=bool)
            src, dst = np.nonzero(ok)
            moves.append(np.stack([arr[src], arr[dst]], 1))
        if not moves:
            return np.zeros((0, 2), dtype=np.int64)
        moves = np.concatenate(moves, 0)
        if len(moves) > self.C:  # keep the moves whose sources are least full (then by index)
            order = np.lexsort((moves[:, 1], moves[:, 0], self.qty[moves[:, 0]]))
            moves = moves[order[: self.C]]
        return moves.astype(np.int64)

    def _observation(self) -> dict[str, np.ndarray]:
        self._moves = self._candidates()
        empty = self.sku < 0
        zone_empty = [float(empty[self.zone == z].mean()) for z in range(min(self.n_zones, 4))]
        zone_empty += [0.0] * (4 - len(zone_empty))
        t = self.t
        forecast1 = self._inbound_rate(t) / self.L
        forecast3 = sum(self._inbound_rate(t + k) for k in range(3)) / self.L
        glob = np.array(
            [
                empty.mean(),
                *zone_empty,
                min(forecast1 * 5, 1.0),
                min(forecast3 * 2, 1.0),
                1.0 - t / self.horizon,
            ],
            dtype=np.float32,
        )
        cand = np.zeros((self.C, F_DIM), dtype=np.float32)
        mask = np.zeros(self.C, dtype=np.int8)
        n = len(self._moves)
        if n:
            s, d = self._moves[:, 0], self._moves[:, 1]
            cap, dmax = float(self.capacity), float(self.distance[-1])
            cand[:n] = np.stack(
                [
                    self.qty[s] / cap,
                    self.qty[d] / cap,
                    self.distance[s] / dmax,
                    self.distance[d] / dmax,
                    (self.distance[s] - self.distance[d]) / dmax,
                    (self.qty[s] + self.qty[d]) / cap,
                    self.demand[self.sku[s]] / self.demand.max(),
                    (self.zone[s] == 0).astype(np.float64),
                ],
                1,
            ).astype(np.float32)
            mask[:n] = 1
        return {"global": glob, "candidates": cand, "mask": mask}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is None and self._seed is not None and self._np_random is None:
            seed = self._seed
        super().reset(seed=seed)
        rng = self.np_random
        self.t = 0
        self.demand = rng.gamma(2.0, 0.25, self.S) + 0.05  # units per epoch and SKU
        self.base_inbound = self.L / 25.0
        self.phase = float(rng.integers(0, 10))
        self.sku = np.full(self.L, -1, dtype=np.int64)
        self.qty = np.zeros(self.L, dtype=np.int64)
        filled = rng.random(self.L) < 0.85
        self.sku[filled] = rng.integers(0, self.S, int(filled.sum()))
        self.qty[filled] = rng.integers(1, self.capacity + 1, int(filled.sum()))
        self.arrived = self.stored = 0
        return self._observation(), self._info(0, 0, 0.0, 0, 0, 0, [])

    def _info(self, freed, freed_near, travel, arrived, stored, moved, invalid) -> dict[str, Any]:
        target = NEAR_WEIGHT * freed_near + (freed - freed_near) - TRAVEL_COST * travel
        return {
            "freed": int(freed),
            "freed_near": int(freed_near),
            "travel": float(travel),
            "moves": int(moved),
            "invalid": int(len(invalid)),
            "arrived": int(arrived),
            "stored": int(stored),
            "source_reward": float(freed),
            "target_reward": float(target),
            "throughput": float(self.stored / self.arrived) if self.arrived else 1.0,
            "n_candidates": int(len(self._moves)),
        }

    def step(self, action):
        action = np.asarray(action, dtype=np.int64).reshape(-1)
        if action.shape != (self.B,):
            raise ValueError(f"action must hold {self.B} candidate indices, got shape {action.shape}")
        n = len(self._moves)
        invalid = [int(a) for a in action if a != self.C and not (0 <= a < n)]
        if invalid and self.invalid_action == "raise":
            raise ValueError(
                f"action entries {invalid} are not candidates: valid rows are 0..{n - 1} "
                f"(and {self.C} for 'no move') at this epoch"
            )
        freed = freed_near = moved = 0
        travel = 0.0
        for a in action:
            if a == self.C or not (0 <= a < n):
                continue
            s, d = (int(v) for v in self._moves[a])
            # re-check: an earlier move this epoch may have emptied s or d or filled d
            if self.sku[s] < 0 or self.sku[d] != self.sku[s] or self.qty[s] + self.qty[d] > self.capacity:
                continue
            self.qty[d] += self.qty[s]
            self.qty[s], self.sku[s] = 0, -1
            freed += 1
            freed_near += int(self.zone[s] == 0)
            travel += abs(self.distance[s] - self.distance[d]) + 1.0
            moved += 1
        rng = self.np_random
        # demand: pick units from each SKU's fullest location first
        for k in range(self.S):
            need = int(rng.poisson(self.demand[k]))
            while need > 0:
                locs = np.flatnonzero(self.sku == k)
                if len(locs) == 0:
                    break
                loc = locs[np.argmax(self.qty[locs])]
                take = min(need, int(self.qty[loc]))
                self.qty[loc] -= take
                need -= take
                if self.qty[loc] == 0:
                    self.sku[loc] = -1
        # inbound: nearest empty location while the putaway crew has time
        arrivals = int(rng.poisson(self._inbound_rate(self.t)))
        stored = 0
        time_left = self.putaway_time
        arrived_units = stored_units = 0
        for _ in range(arrivals):
            k, units = int(rng.integers(0, self.S)), int(rng.integers(3, self.capacity + 1))
            arrived_units += units
            empty = np.flatnonzero(self.sku < 0)
            if len(empty) == 0:
                continue
            loc = int(empty[0])  # locations are ordered by distance
            if self.distance[loc] > time_left:
                continue
            time_left -= self.distance[loc]
            self.sku[loc], self.qty[loc] = k, units
            stored += 1
            stored_units += units
        self.arrived += arrived_units
        self.stored += stored_units
        self.t += 1
        info = self._info(freed, freed_near, travel, arrived_units, stored_units, moved, invalid)
        reward = info["source_reward"] if self.objective == "source" else info["target_reward"]
        truncated = self.t >= self.horizon
        obs = self._observation()
        info["n_candidates"] = int(len(self._moves))
        return obs, float(reward), False, truncated, info

    def candidate_moves(self) -> np.ndarray:
        """The current candidate rows as ``(n, 2)`` (source, target) location pairs."""
        return self._moves.copy()

    def render(self):
        if self.render_mode != "ansi":
            return None
        fill = "".join("." if s < 0 else str(min(int(q), 9)) for s, q in zip(self.sku, self.qty))
        return f"t={self.t} throughput={self.stored / max(self.arrived, 1):.3f} [{fill}]"


def heuristic_scores(obs: dict[str, np.ndarray]) -> np.ndarray:
    """Greedy heuristic score of each candidate: locations freed per unit of travel, ``1 / (|d_s - d_t| + 1)``.

    Shapes: ``obs["candidates"]`` ``(C, 8)`` -> ``(C,)``, ``-inf`` on masked rows.
    """
    cand, mask = np.asarray(obs["candidates"]), np.asarray(obs["mask"]).astype(bool)
    travel = np.abs(cand[:, 4]) * 10.0 + 1.0  # feature 4 is (d_s - d_t) / 10
    return np.where(mask, 1.0 / travel, -np.inf)


def _scored_candidates(obs: dict[str, np.ndarray], budget: int) -> tuple[np.ndarray, np.ndarray]:
    """Check a policy's inputs; return the heuristic scores ``(C,)`` and the valid rows' indices."""
    if not isinstance(obs, dict) or not {"candidates", "mask"} <= set(obs):
        raise TypeError(
            f"obs must be an observation dict with 'candidates' and 'mask', got {type(obs).__name__}"
        )
    check_int("budget", budget, low=0)
    scores = heuristic_scores(obs)
    return scores, np.flatnonzero(np.isfinite(scores))


def heuristic_policy(obs: dict[str, np.ndarray], budget: int) -> np.ndarray:
    """The greedy consolidation heuristic (the behaviour policy without noise).

    Picks the ``budget`` candidates with the best freed-per-travel score (ties by row index); pads
    with the no-move value ``C`` when fewer candidates exist.

    Returns
    -------
    ndarray ``(budget,)`` int64.
    """
    scores, valid = _scored_candidates(obs, budget)
    C = len(scores)
    order = valid[np.lexsort((valid, -scores[valid]))][:budget]
    out = np.full(budget, C, dtype=np.int64)
    out[: len(order)] = order
    return out


def behaviour_policy(
    obs: dict[str, np.ndarray],
    budget: int,
    rng: np.random.Generator,
    temperature: float = 0.5,
    epsilon: float = 0.1,
) -> np.ndarray:
    """The logging policy: heuristic scores with Gumbel-top-B sampling at ``temperature``, each slot
    replaced by a uniformly random candidate with probability ``epsilon``."""
    scores, valid = _scored_candidates(obs, budget)
    C = len(scores)
    out = np.full(budget, C, dtype=np.int64)
    if len(valid) == 0:
        return out
    logits = np.log(scores[valid]) / temperature  # log of freed-per-travel, sharpened
    keys = logits + rng.gumbel(size=len(valid))
    order = list(valid[np.argsort(-keys)])
    chosen: list[int] = []
    for _ in range(min(budget, len(valid))):
        if rng.random() < epsilon:
            pool = [v for v in valid if v not in chosen]
            pick = int(rng.choice(pool))
        else:
            pick = next(v for v in order if v not in chosen)
        chosen.append(int(pick))
    out[: len(chosen)] = chosen
    return out


def register() -> None:
    """Register :data:`ENV_ID` with Gymnasium (idempotent)."""
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point="neurips26.rl.aiql.env:WarehouseConsolidationEnv")


register()

__all__ = [
    "ENV_ID",
    "F_DIM",
    "G_DIM",
    "WarehouseConsolidationEnv",
    "behaviour_policy",
    "heuristic_policy",
    "heuristic_scores",
    "register",
]
