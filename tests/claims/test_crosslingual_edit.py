"""Smoke profile of the cross-lingual edit claim check: structure, arms. Generic smoke checks (finiteness,
determinism, glossary, plot): test_conformance.py."""



def test_smoke_arms_and_exactness(smoke_result):
    a = smoke_result("crosslingual_edit")
    for name in ("efficacy", "transfer", "locality", "alpha", "f_orth"):
        assert set(a["metrics"][name]) == {"rome", "memit", "alphaedit", "rome_aligned", "memit_aligned", "alphaedit_aligned"}
    # the decomposition identity and bit-exact revert hold on every run
    assert all(v == [1.0] for v in a["metrics"]["decomposition_exact"].values())
    assert a["metrics"]["revert_exact"]["rome"] == [1.0]
    perf = a["info"][0]["performance"]
    assert perf["covariance_s"] > 0 and perf["rome_edit_s_per_fact"] > 0
