"""REGATE template world: a transaction stream with regime shifts and its document stream
(see :mod:`neurips26.temporal.regate`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from neurips26.common.checks import check_float, check_int
from neurips26.temporal.regate.tokens import _EFFECTIVE, POLICY_TYPES, Document, PolicySchema

# ------------------------------------------------------------------------------------------ template world
_GROUP_NAMES = (
    "Harbor",
    "Pine",
    "Granite",
    "Willow",
    "Falcon",
    "Cedar",
    "Summit",
    "Meadow",
    "Orchid",
    "Basalt",
)


@dataclass
class TransactionWorld:
    """A generated transaction stream with regime shifts, labels and the document stream."""

    data: object
    labels: Tensor
    group_of: Tensor
    documents: list[Document]
    entity_index: dict[str, int]
    group_index: dict[str, int]
    shift_times: tuple[int, ...]
    target_groups: tuple[int, ...]
    reference_tokens: set[tuple[int, str, int]]


def stated_effective_dates(docs: Sequence[Document]) -> dict[str, float]:
    """Effective dates as written in each document ("effective day N"), without the publication clamp."""
    out = {}
    for d in docs:
        m = _EFFECTIVE.search(d.text)
        if m:
            out[d.doc_id] = float(m.group(1))
    return out


def default_schema() -> PolicySchema:
    """The schema used by the template world's rule-based extractor."""
    return PolicySchema(
        POLICY_TYPES,
        patterns={
            "enforcement_action": [r"enforcement action"],
            "sanction": [r"\bsanction(?:ed|s)?\b"],
            "license_grant": [r"granted a licen[cs]e"],
            "reporting_rule": [r"reporting rule"],
        },
        directions={"enforcement_action": 1, "sanction": 1, "license_grant": -1, "reporting_rule": 0},
    )


def transaction_world(
    num_accounts: int = 500,
    num_events: int = 6000,
    num_groups: int = 8,
    illicit_frac: float = 0.05,
    shifts: Sequence[float] = (0.3, 0.8),
    target_frac: float = 0.3,
    num_distractors: int = 10,
    seed: int = 0,
) -> TransactionWorld:
    """Spec's template world: accounts in groups, community-biased transfers, illicit senders, documents.

    Before any shift 5% illicit accounts send fan-out bursts with larger amounts (pattern P1). At each shift
    ``k`` (a fraction of the events) ``target_frac`` of the accounts of a target group turn illicit with a
    pattern that looks licit (same amounts, same in-group partners; P2) and the P1 accounts' activity falls
    to 40% (the activity migrates), so only the enforcement document
    on that group, published shortly before the shift, can tell. Documents: one enforcement document per
    shift, distractors (licences and reporting rules for other groups), a hedged rumour, a retroactive
    report published late (effective at the first shift), and a mention of an unknown exchange.
    Label of an event: its sender is illicit at the event time.
    """
    from neurips26.common.temporal import make_stream

    check_int("num_accounts", num_accounts, low=20)
    check_int("num_events", num_events, low=100)
    check_int("num_groups", num_groups, low=len(shifts) + 2, high=len(_GROUP_NAMES))
    check_float("illicit_frac", illicit_frac, 0.0, 0.5)
    check_float("target_frac", target_frac, 0.0, 1.0)
    for s in shifts:
        check_float("shifts", s, 0.0, 1.0, low_open=True, high_open=True)
    rng = np.random.default_rng(seed)
    group = rng.integers(0, num_groups, num_accounts)
    members = [np.flatnonzero(group == g) for g in range(num_groups)]
    p1 = np.zeros(num_accounts, bool)
    p1[rng.permutation(num_accounts)[: max(1, int(illicit_frac * num_accounts))]] = True
    targets = tuple(int(g) for g in rng.permutation(num_groups)[: len(shifts)])
    turned = []
    for g in targets:
        cand = members[g][~p1[members[g]]]
        turned.append(rng.permutation(cand)[: max(1, int(target_frac * cand.size))])
    gaps = np.ceil(rng.exponential(10.0, num_events)).astype(np.int64)
    times = np.cumsum(gaps)
    shift_idx = [int(s * num_events) for s in shifts]
    src = np.empty(num_events, np.int64)
    dst = np.empty(num_events, np.int64)
    amount = np.empty(num_events)
    label = np.zeros(num_events, np.float32)
    illicit_now = p1.copy()
    activity = np.where(p1, 0.5, 1.0)
    burst_left, burst_src = 0, -1
    for i in range(num_events):
        for k, si in enumerate(shift_idx):
            if i == si:
                illicit_now[turned[k]] = True
                activity[turned[k]] = 1.5
                activity[p1] *= 0.4  # illicit activity migrates from the P1 accounts into the target group
        if burst_left > 0:
            u, burst_left = burst_src, burst_left - 1
        else:
            u = int(rng.choice(num_accounts, p=activity / activity.sum()))
            if p1[u]:
                burst_left, burst_src = 3, u
        if p1[u]:  # fan-out to random accounts, large amounts
            v = int(rng.integers(num_accounts))
            amt = rng.lognormal(4.0, 0.5)
        else:  # licit and P2 look alike: in-group partner with prob 0.7, ordinary amounts
            pool = members[group[u]] if rng.random() < 0.7 else np.arange(num_accounts)
            v = int(pool[rng.integers(pool.size)])
            amt = rng.lognormal(3.0, 1.0)
        if v == u:
            v = (u + 1) % num_accounts
        src[i], dst[i], amount[i], label[i] = u, v, amt, float(illicit_now[u])
    same = (group[src] == group[dst]).astype(np.float64)
    msg = np.stack(
        [np.log(amount) / 5.0, same, rng.normal(0, 1, num_events), rng.normal(0, 1, num_events)], 1
    )
    data = make_stream(
        torch.from_numpy(src), torch.from_numpy(dst), torch.from_numpy(times), torch.from_numpy(msg).float()
    )
    horizon = int(times[-1])
    alias = {g: f"{_GROUP_NAMES[g]} Exchange" for g in range(num_groups)}
    ticker = {g: _GROUP_NAMES[g][:3].upper() + "X" for g in range(num_groups)}
    group_index = {**{alias[g]: g for g in alias}, **{ticker[g]: g for g in ticker}}
    docs: list[Document] = []
    ref: set[tuple[int, str, int]] = set()
    shift_times = tuple(int(times[si]) for si in shift_idx)
    delta = max(1, horizon // 50)
    for k, (g, ts) in enumerate(zip(targets, shift_times)):
        docs.append(
            Document(
                f"enforce{k}",
                float(ts - delta),
                "regulator",
                f"Regulators announced an enforcement action against {alias[g]} ({ticker[g]}), effective day {ts}. "
                "Transfers routed through the exchange face heightened scrutiny.",
            )
        )
        ref.add((g, "enforcement_action", 1))
    others = [g for g in range(num_groups) if g not in targets]
    for j in range(num_distractors):
        g = int(others[j % len(others)])
        p = float(rng.integers(1, horizon))
        if j % 2 == 0:
            text = f"{alias[g]} was granted a license to operate new payment corridors."
            ref.add((g, "license_grant", -1))
        else:
            text = f"A new reporting rule requires {alias[g]} ({ticker[g]}) to file monthly statements."
            ref.add((g, "reporting_rule", 0))
        docs.append(Document(f"distractor{j}", p, "newswire", text))
    g = int(others[0])
    docs.append(
        Document(
            "rumour",
            float(horizon // 10),
            "forum",
            f"Unconfirmed rumours of a possible enforcement action against {ticker[g]} circulated today.",
        )
    )
    docs.append(
        Document(
            "late_report",
            float(int(0.9 * horizon)),
            "newswire",
            f"A retrospective report confirms the enforcement action against {alias[targets[0]]}, "
            f"effective day {shift_times[0]}.",
        )
    )
    docs.append(
        Document("unknown", float(horizon // 3), "newswire", "Zephyr Exchange was granted a license abroad.")
    )
    docs.sort(key=lambda d: (d.publish_time, d.doc_id))
    return TransactionWorld(
        data,
        torch.from_numpy(label),
        torch.from_numpy(group),
        docs,
        {},
        group_index,
        shift_times,
        targets,
        ref,
    )
