"""Smoke profile of the DHO claim check: structure, arms. Generic smoke checks (finiteness, determinism,
glossary, plot): test_conformance.py."""

from neurips26.claims.dho import CLAIM


def test_smoke_arms_and_budget(smoke_result):
    a = smoke_result("dho")
    for name in ("acc_digits_k2", "acc_digits_k5", "acc_mnist_k2", "acc_mnist_k5"):
        assert set(a["metrics"][name]) == set(CLAIM.arms), name
    assert set(CLAIM.glossary) == set(a["metrics"])
    info = a["info"][0]
    assert len(info["per_setting"]) == 4
    steps = {arm: rec["steps"] for arm, rec in info["budget"].items()}
    assert set(steps) == {"dho", "single_head_kd", "ce_only"} and len(set(steps.values())) == 1
    # the dual-head student only adds one d x K head
    assert 0 < a["metrics"]["param_overhead"]["dho"][0] < 0.1


def test_shift_is_the_padded_crop_at_the_drawn_offsets():
    import torch
    import torch.nn.functional as F

    from neurips26.claims.dho import _shift

    for shape in ((5, 1, 8, 8), (7, 1, 14, 14)):
        x = torch.rand(shape, generator=torch.Generator().manual_seed(shape[0]))
        got = _shift(x, torch.Generator().manual_seed(1))
        gen = torch.Generator().manual_seed(1)  # the same draws: dy then dx
        dy, dx = (
            torch.randint(0, 3, (shape[0],), generator=gen),
            torch.randint(0, 3, (shape[0],), generator=gen),
        )
        pad = F.pad(x, (1, 1, 1, 1))
        h, w = shape[2:]
        want = torch.stack([pad[i, :, dy[i] : dy[i] + h, dx[i] : dx[i] + w] for i in range(shape[0])])
        assert got.shape == x.shape and torch.equal(got, want)  # same kernel: indexing only
        assert torch.equal(_shift(x, torch.Generator().manual_seed(1)), got)  # same kernel: seeded rerun
