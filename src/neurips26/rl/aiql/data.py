"""Offline logs of the warehouse as Minari datasets, and their padded, masked batches for AIQL.

Logs are recorded with ``minari.DataCollector`` around the registered environment and written to
the local Minari root (``$MINARI_DATASETS_PATH``, by default ``~/.minari/datasets``); nothing is
downloaded. Any offline-RL library can read them with ``minari.load_dataset(dataset_id)``.
:class:`OfflineRankingDataset` turns a Minari dataset into epochs with variable-size candidate
sets (only the valid rows are kept) and collates batches padded to the batch's largest set.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from neurips26.common.checks import check_int
from neurips26.common.optional import require
from neurips26.rl.aiql.env import ENV_ID

Policy = Callable[[dict[str, np.ndarray], np.random.Generator], np.ndarray]
INFO_KEYS = ("source_reward", "target_reward", "throughput", "freed", "freed_near", "travel")


def make_env(**kwargs: Any):
    """``gymnasium.make`` of the registered warehouse (strict actions unless overridden)."""
    gym = require("gymnasium", "envs")
    kwargs.setdefault("invalid_action", "raise")
    return gym.make(ENV_ID, **kwargs)


def collect_minari(
    dataset_id: str,
    policy: Policy,
    episodes: int,
    seed: int,
    env_kwargs: dict[str, Any] | None = None,
    algorithm_name: str = "neurips26 behaviour policy",
    overwrite: bool = False,
    data_format: str = "arrow",
):
    """Roll ``policy`` in the warehouse for ``episodes`` episodes and save a Minari dataset.

    Parameters
    ----------
    dataset_id : str
        Minari id, e.g. ``"neurips26/warehouse/source-v0"``.
    policy : callable
        ``policy(obs, rng) -> action`` (``(budget,)`` candidate indices).
    episodes : int
    seed : int
        Episode ``e`` resets with seed ``seed + e``; the policy's generator is seeded with ``seed``.
    env_kwargs : dict, optional
        Keyword arguments of the environment (recorded in the dataset's env spec).
    overwrite : bool
        Replace an existing local dataset with the same id (otherwise it is an error).
    data_format : {"arrow", "parquet", "hdf5"}
        Minari storage format; ``"arrow"`` needs only ``pyarrow`` (``"hdf5"`` needs ``h5py``).

    Returns
    -------
    minari.MinariDataset
    """
    minari = require("minari", "envs")
    check_int("episodes", episodes, low=1)
    if dataset_id in minari.list_local_datasets():
        if not overwrite:
            raise ValueError(
                f"a local Minari dataset {dataset_id!r} exists; pass overwrite=True to replace it"
            )
        minari.delete_dataset(dataset_id)
    env = minari.DataCollector(make_env(**(env_kwargs or {})), record_infos=True, data_format=data_format)
    rng = np.random.default_rng(seed)
    for e in range(episodes):
        obs, _ = env.reset(seed=seed + e)
        done = False
        while not done:
            obs, _, terminated, truncated, _ = env.step(policy(obs, rng))
            done = terminated or truncated
    dataset = env.create_dataset(
        dataset_id=dataset_id,
        algorithm_name=algorithm_name,
        author="neurips26",
        author_email="neurips26@localhost",
        code_permalink="neurips26.rl.aiql.data.collect_minari",
        description=f"WarehouseConsolidationEnv logs, {episodes} episodes, seed {seed}, env kwargs {env_kwargs or {}}",
    )
    env.close()
    return dataset


def _spec_signature(spec) -> tuple[str, dict[str, Any]]:
    kwargs = dict(getattr(spec, "kwargs", {}) or {})
    kwargs.pop("invalid_action", None)  # how bad actions are treated does not change the data
    kwargs.pop("render_mode", None)
    return spec.id, kwargs


def check_same_env(dataset, env_spec) -> None:
    """Raise ``ValueError`` unless ``dataset`` was recorded on an environment with ``env_spec``'s id and kwargs."""
    recorded = dataset.env_spec
    if recorded is None:
        raise ValueError(f"dataset {dataset.id!r} carries no environment spec")
    a, b = _spec_signature(recorded), _spec_signature(env_spec)
    if a != b:
        raise ValueError(
            f"dataset {dataset.id!r} was built from another environment spec: recorded {a[0]} {a[1]}, "
            f"expected {b[0]} {b[1]}"
        )


class OfflineRankingDataset(torch.utils.data.Dataset):
    """Logged decision epochs with variable-size candidate sets, padded and masked per batch.

    Each item holds ``global (G,)``, ``candidates (n_t, F)`` (valid rows only), ``action (K,)``
    (candidate rows, ``-1`` for "no move"), ``reward``, ``next_global (G,)``, ``done`` and the
    ``info`` columns :data:`INFO_KEYS` of the step. :meth:`collate` pads candidates to the batch's
    largest ``n_t`` and returns a ``mask``.

    Shapes
    ------
    A collated batch: ``global (E, G)``, ``candidates (E, N, F)``, ``mask (E, N)`` bool,
    ``action (E, K)`` long, ``reward (E,)``, ``next_global (E, G)``, ``done (E,)`` and each info key
    ``(E,)``.
    """

    def __init__(self, records: dict[str, Any], reward_key: str = "reward") -> None:
        if not isinstance(records, dict) or "candidates" not in records:
            raise TypeError(
                f"records must be a dict with a 'candidates' column, got {type(records).__name__}"
            )
        if not isinstance(reward_key, str) or reward_key not in records:
            raise ValueError(f"reward_key {reward_key!r} is not a column of records ({sorted(records)})")
        self.records = records
        self.reward_key = reward_key
        self.size = len(records["candidates"])

    @classmethod
    def collect(
        cls,
        env,
        policy: Policy,
        episodes: int,
        seed: int,
        dataset_id: str | None = None,
        overwrite: bool = True,
    ) -> OfflineRankingDataset:
        """Collect through a Minari ``DataCollector`` on ``env``'s registered spec and load the result."""
        spec = env.spec if env.spec is not None else None
        if spec is None or spec.id != ENV_ID:
            raise ValueError(f"collect needs an environment made with gymnasium.make({ENV_ID!r})")
        kwargs = dict(spec.kwargs)
        dataset_id = dataset_id or f"neurips26/warehouse/tmp-s{seed}-v0"
        data = collect_minari(dataset_id, policy, episodes, seed, kwargs, overwrite=overwrite)
        return cls.from_minari(data, env_spec=spec)

    @classmethod
    def from_minari(cls, dataset, env_spec=None, reward: str = "reward") -> OfflineRankingDataset:
        """Read a Minari dataset of the warehouse (checked against ``env_spec`` when given).

        ``reward``: ``"reward"`` (what the environment returned) or an info key such as
        ``"target_reward"``.
        """
        if isinstance(dataset, str):
            dataset = require("minari", "envs").load_dataset(dataset)
        if env_spec is not None:
            check_same_env(dataset, env_spec)
        C = int(dataset.action_space.nvec[0]) - 1
        rec: dict[str, list] = {
            k: [] for k in ("global", "candidates", "action", "reward", "next_global", "done")
        }
        rec.update({k: [] for k in INFO_KEYS})
        for ep in dataset.iterate_episodes():
            obs = ep.observations
            T = len(ep.rewards)
            for t in range(T):
                n = int(obs["mask"][t].sum())
                rec["global"].append(np.asarray(obs["global"][t], dtype=np.float32))
                rec["candidates"].append(np.asarray(obs["candidates"][t][:n], dtype=np.float32))
                act = np.asarray(ep.actions[t], dtype=np.int64).copy()
                act[(act >= n) | (act == C)] = -1
                _, first = np.unique(act, return_index=True)
                dup = np.ones(len(act), dtype=bool)
                dup[first] = False
                act[dup] = -1  # a repeated candidate was a no-op for the environment
                order = np.argsort(act < 0, kind="stable")  # used slots first, order kept
                rec["action"].append(act[order])
                rec["reward"].append(float(ep.rewards[t]))
                rec["next_global"].append(np.asarray(obs["global"][t + 1], dtype=np.float32))
                rec["done"].append(bool(ep.terminations[t]))
                for k in INFO_KEYS:
                    rec[k].append(float(ep.infos[k][t + 1]))
        records = {
            "global": torch.tensor(np.stack(rec["global"])),
            "next_global": torch.tensor(np.stack(rec["next_global"])),
            "candidates": [torch.from_numpy(c) for c in rec["candidates"]],
            "action": torch.tensor(np.stack(rec["action"])),
            "reward": torch.tensor(rec["reward"], dtype=torch.float32),
            "done": torch.tensor(rec["done"], dtype=torch.float32),
            **{k: torch.tensor(rec[k], dtype=torch.float32) for k in INFO_KEYS},
        }
        out = cls(records)
        out.dataset_id = dataset.id
        out.env_spec = dataset.env_spec
        if reward != "reward":
            out = out.with_reward(reward)
        return out

    def with_reward(self, key: str) -> OfflineRankingDataset:
        """The same epochs with ``reward`` replaced by the info column ``key`` (e.g. ``"target_reward"``)."""
        if key not in self.records:
            raise ValueError(f"no column {key!r}; columns: {sorted(self.records)}")
        records = dict(self.records)
        records["reward"] = self.records[key].clone()
        out = OfflineRankingDataset(records)
        out.__dict__.update({k: v for k, v in self.__dict__.items() if k not in ("records",)})
        out.records = records
        return out

    @staticmethod
    def concat(parts: Sequence[OfflineRankingDataset]) -> OfflineRankingDataset:
        """Concatenate datasets epoch-wise (e.g. source and target logs for pooling)."""
        if not parts:
            raise ValueError("nothing to concatenate")
        keys = set(parts[0].records)
        records: dict[str, Any] = {}
        for k in keys:
            values = [p.records[k] for p in parts]
            records[k] = sum(values, []) if isinstance(values[0], list) else torch.cat(values)
        return OfflineRankingDataset(records)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: v[i] for k, v in self.records.items()}

    @staticmethod
    def collate(items: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """Pad candidate sets to the largest in the batch; ``mask`` marks real rows."""
        if not items:
            raise ValueError("empty batch")
        N = max(1, max(int(it["candidates"].shape[0]) for it in items))
        F = items[0]["candidates"].shape[1]
        cand = torch.zeros(len(items), N, F)
        mask = torch.zeros(len(items), N, dtype=torch.bool)
        for j, it in enumerate(items):
            n = it["candidates"].shape[0]
            cand[j, :n] = it["candidates"]
            mask[j, :n] = True
        out = {"candidates": cand, "mask": mask}
        for k in items[0]:
            if k != "candidates":
                out[k] = torch.stack([torch.as_tensor(it[k]) for it in items])
        return out

    def sample(self, batch_size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """A uniformly drawn, collated batch."""
        idx = torch.randint(0, self.size, (batch_size,), generator=generator)
        return self.gather(idx)

    def gather(self, idx: torch.Tensor) -> dict[str, torch.Tensor]:
        """``collate([self[i] for i in idx])`` without the per-item dicts: tensor columns are indexed at once.

        Shapes: ``idx`` ``(E,)`` long -> a collated batch (see :meth:`collate`).
        """
        idx = torch.as_tensor(idx, dtype=torch.long).reshape(-1)
        if idx.numel() == 0:
            raise ValueError("empty batch")
        if bool(((idx < 0) | (idx >= self.size)).any()):
            raise IndexError(f"indices must lie in [0, {self.size}), got {idx.tolist()}")
        rows = [self.records["candidates"][int(i)] for i in idx]
        N = max(1, max(int(c.shape[0]) for c in rows))
        cand = torch.zeros(len(rows), N, rows[0].shape[1])
        mask = torch.zeros(len(rows), N, dtype=torch.bool)
        for j, c in enumerate(rows):
            cand[j, : c.shape[0]] = c
            mask[j, : c.shape[0]] = True
        out = {"candidates": cand, "mask": mask}
        for k, v in self.records.items():
            if k != "candidates":
                out[k] = (
                    v[idx]
                    if isinstance(v, torch.Tensor)
                    else torch.stack([torch.as_tensor(v[int(i)]) for i in idx])
                )
        return out


__all__ = [
    "INFO_KEYS",
    "OfflineRankingDataset",
    "check_same_env",
    "collect_minari",
    "make_env",
]
