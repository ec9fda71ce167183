"""RadOmni curriculum: stages, retention schedule, the resumable staged pretrainer."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from neurips26.common.checks import check_int
from neurips26.vision.radomni.encoder import freeze_early_blocks


# ------------------------------------------------------------------------------------------------ curriculum
@dataclass
class Stage:
    """One curriculum stage: its own objectives, step count, frozen blocks and optional objective weights."""

    name: str
    objectives: list[str]
    steps: int
    freeze_blocks: int = 0
    weights: dict[str, float] | None = None


class CurriculumSchedule:
    """Which objectives are active at each stage: with ``retain`` the union of stages ``1..s`` (in order of
    first appearance), otherwise stage ``s``'s own; ``stage_loss`` forms ``sum_j w_j L_j / scale_j``."""

    def __init__(self, stages: Sequence[Stage], retain: bool = True, normalize_losses: bool = True):
        if not stages or not all(isinstance(s, Stage) for s in stages):
            raise TypeError("stages must be a non-empty sequence of Stage")
        for i, s in enumerate(stages):
            check_int(f"stages[{i}].steps", s.steps, 0)
            check_int(f"stages[{i}].freeze_blocks", s.freeze_blocks, 0)
            if not s.objectives:
                raise ValueError(f"stages[{i}] ({s.name!r}) has no objectives")
        self.stages, self.retain, self.normalize_losses = list(stages), bool(retain), bool(normalize_losses)

    def validate(self, names: Iterable[str]) -> None:
        known = set(names)
        for s in self.stages:
            for o in s.objectives:
                if o not in known:
                    raise KeyError(f"stage {s.name!r} uses unknown objective {o!r}; known: {sorted(known)}")

    def active_objectives(self, stage_index: int) -> list[str]:
        check_int("stage_index", stage_index, 0, len(self.stages) - 1)
        if not self.retain:
            return list(dict.fromkeys(self.stages[stage_index].objectives))
        return list(dict.fromkeys(o for s in self.stages[: stage_index + 1] for o in s.objectives))

    def weight(self, stage_index: int, name: str) -> float:
        w = self.stages[stage_index].weights or {}
        return float(w.get(name, 1.0))

    def stage_loss(
        self, losses: Mapping[str, Tensor], stage_index: int, scales: Mapping[str, float] | None = None
    ) -> Tensor:
        total = None
        for name in self.active_objectives(stage_index):
            if name not in losses:
                continue
            term = self.weight(stage_index, name) * losses[name] / ((scales or {}).get(name, 1.0))
            total = term if total is None else total + term
        if total is None:
            raise ValueError(f"no active objective of stage {stage_index} produced a loss")
        return total


def _adamw(params, lr: float = 1e-3) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.05)


class RadOmniPretrainer:
    """Runs a :class:`CurriculumSchedule`: per stage freeze the first ``freeze_blocks`` blocks (+ embedding),
    build a fresh optimiser over the trainable encoder parameters and the active objectives' parameters, and
    take ``steps`` steps on ``L^(s)``. An objective whose ``requires`` keys a batch lacks is skipped (counted in
    the log). Each stage reseeds torch with ``seed * 1000 + stage`` so a resumed run repeats the same masks.

    ``loaders`` maps a stage name (or ``"default"``) to an iterable of batches; it is re-iterated (cycled)
    from its start at every stage.
    """

    def __init__(
        self,
        encoder: nn.Module,
        objectives: Mapping[str, nn.Module],
        schedule: CurriculumSchedule,
        optimizer_factory: Callable[[Iterable[Tensor]], torch.optim.Optimizer] = _adamw,
        block_attr: str = "blocks",
        seed: int = 0,
    ):
        if not isinstance(schedule, CurriculumSchedule):
            raise TypeError(f"schedule must be a CurriculumSchedule, got {type(schedule).__name__}")
        schedule.validate(objectives)
        n_blocks = len(getattr(encoder, block_attr))
        for i, s in enumerate(schedule.stages):
            if s.freeze_blocks > n_blocks:
                raise ValueError(
                    f"stages[{i}].freeze_blocks = {s.freeze_blocks} exceeds the {n_blocks} blocks"
                )
        self.encoder, self.objectives, self.schedule = encoder, dict(objectives), schedule
        self.optimizer_factory, self.block_attr = optimizer_factory, block_attr
        self.seed = check_int("seed", seed)
        self.completed = -1
        self.logs: list[dict] = []

    def _params(self, active: list[str]) -> list[Tensor]:
        seen, out = set(), []
        for m in (self.encoder, *(self.objectives[a] for a in active)):
            for p in m.parameters():
                if p.requires_grad and id(p) not in seen:
                    seen.add(id(p))
                    out.append(p)
        return out

    def fit(
        self,
        loaders: Mapping[str, Iterable],
        checkpoint_dir: str | Path | None = None,
        stop_after: int | None = None,
    ) -> list[dict]:
        """Train the stages after the last completed one (up to ``stop_after``); returns per-stage logs."""
        if not isinstance(loaders, Mapping):
            raise TypeError("loaders must be a dict stage name (or 'default') -> iterable of batches")
        last = (
            len(self.schedule.stages) - 1
            if stop_after is None
            else check_int("stop_after", stop_after, 0, len(self.schedule.stages) - 1)
        )
        for si in range(self.completed + 1, last + 1):
            stage = self.schedule.stages[si]
            loader = loaders.get(stage.name, loaders.get("default"))
            if loader is None:
                raise KeyError(f"no loader for stage {stage.name!r} (and no 'default')")
            torch.manual_seed(self.seed * 1000 + si)
            freeze_early_blocks(self.encoder, stage.freeze_blocks, self.block_attr)
            active = self.schedule.active_objectives(si)
            self.encoder.train()
            for a in active:
                self.objectives[a].train()
            opt = self.optimizer_factory(self._params(active))
            scales: dict[str, float] = {}
            log = {
                "stage": stage.name,
                "active": active,
                "steps": 0,
                "skipped": dict.fromkeys(active, 0),
                "loss": [],
                "terms": {a: [] for a in active},
                "freeze_blocks": stage.freeze_blocks,
            }
            it = iter(loader)
            for _ in range(stage.steps):
                try:
                    batch = next(it)
                except StopIteration:
                    it = iter(loader)
                    batch = next(it)
                losses = {}
                for a in active:
                    if all(k in batch for k in getattr(self.objectives[a], "requires", ())):
                        losses[a] = self.objectives[a](batch, self.encoder)
                        log["terms"][a].append(float(losses[a].detach()))
                    else:
                        log["skipped"][a] += 1
                if self.schedule.normalize_losses:
                    for a, v in losses.items():
                        scales.setdefault(a, max(float(v.detach()), 1e-8))
                loss = self.schedule.stage_loss(losses, si, scales)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                log["loss"].append(float(loss.detach()))
                log["steps"] += 1
            log["scales"] = scales
            self.logs.append(log)
            self.completed = si
            if checkpoint_dir is not None:
                Path(checkpoint_dir).mkdir(parents=True, exist_ok=True)
                torch.save(self.state_dict(), Path(checkpoint_dir) / f"stage_{si}.pt")
        return self.logs

    def state_dict(self) -> dict:
        return {
            "encoder": copy.deepcopy(self.encoder.state_dict()),
            "objectives": {k: copy.deepcopy(v.state_dict()) for k, v in self.objectives.items()},
            "completed": self.completed,
            "seed": self.seed,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.encoder.load_state_dict(state["encoder"])
        for k, v in state["objectives"].items():
            self.objectives[k].load_state_dict(v)
        self.completed = int(state["completed"])
        self.seed = int(state["seed"])
