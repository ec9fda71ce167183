"""The report's glossary: the decision rule's terms, then every metric and term the results define."""

from __future__ import annotations

from typing import Any

GENERIC_GLOSSARY = {
    "verdict": (
        "reproduced / not reproduced / inconclusive, computed by the declared criteria from the per-seed "
        "numbers and re-judged from the stored metrics by the current rule (rule version 3, claims-v3) whenever "
        "a report or the README is built. Every tested headline of the paper gets its own verdict; the claim's "
        "verdict is the verdict of its primary headline(s) (declared in the claim; by default the first headline "
        "tested by an evidence criterion). In order: inconclusive (error) when a premise or criterion could not "
        "be computed, inconclusive (testbed) when a premise does not hold, inconclusive (error-suspect) when an "
        "evidence criterion's arm collapsed to its floor and no diagnosis is declared, else the primary "
        "headline's verdict. Secondary headlines are shown with their own verdicts and never change the claim's."
    ),
    "headline verdict": (
        "from the headline's evidence criteria (and cost criteria that opt in): reproduced when every one is "
        "reproduced at its own level (an intersection-union test, no correction needed) and every design check "
        "of the headline holds; not reproduced when a refutation survives Holm's step-down correction over the "
        "headline's evidence criteria (family-wise error 1 - confidence, 10 %: sorted refutation p-values "
        "p_(i) are compared with 0.1/(k - i + 1), stopping at the first that exceeds it); otherwise inconclusive "
        "with the reason error, testbed, error-suspect, design (a design check failed: a bug check, it never "
        "decides), testbed: floor, constant, evidence (nothing deciding) or spread."
    ),
    "Holm": (
        "family-wise control over one headline's k evidence criteria: p_refute is the one-sided p-value of "
        "'the effect is at or below the margin' (Student t, n - 1 dof); the smallest must be <= alpha/k, the "
        "next <= alpha/(k-1), and so on; a criterion is refuted only while every smaller p was."
    ),
    "primary headline": "the paper's main empirical result; its verdict is the claim's verdict (marked * in the headline table).",
    "cost": (
        "kind of a criterion about speed or memory of our own CPU implementation: reported, never deciding a "
        "headline unless the criterion states why (cost_decides: the headline is about that cost and our code is "
        "the paper's algorithm at the paper's granularity)."
    ),
    "testbed: floor": (
        "both arms of a comparison sit at the same floor, ceiling or sentinel value (0, 1, +-inf, NaN, the "
        "criterion's floor or a declared sentinel such as a step horizon) on every seed: the comparison cannot "
        "show anything, so it is inconclusive."
    ),
    "error-suspect": (
        "the judged arm sits exactly at the criterion's floor (0 when larger is better, +inf when smaller is "
        "better, unless declared) on every seed while the baseline does not: a collapsed arm is a bug suspect; "
        "the claim stays inconclusive until it declares a diagnosis for the criterion, which the report prints."
    ),
    "constant": "both arms report one and the same constant on every seed (e.g. a config value compared with itself): the criterion cannot fail, so it is inconclusive.",
    "hash": (
        "current when the claim hash recorded in the result equals the hash of today's code: every neurips26 "
        "module the claim imports, transitively (claim package, claims it imports, area modules, common/), plus "
        "claims/criteria.py; stale otherwise (the numbers were produced by other code)."
    ),
    "unseen-seed agreement": (
        "for each committed full-profile result, the runs in results/seedcheck/ of the same claim code and "
        "config on seeds the full run did not use, both re-judged by the current rule: same verdict or not. A "
        "decisive verdict that flips is shown as inconclusive (spread) with both runs."
    ),
    "same direction": (
        "the quick re-check beside a committed verdict: the sign of the committed deciding criterion's effect "
        "(estimate minus margin on the larger-is-better scale) in this machine's quick run against the committed "
        "full run."
    ),
    "decision rule": (
        "per-seed values v (paired differences, sign-adjusted so that larger is better) with mean m, sd s, "
        "n seeds; one-sided bounds L = m - t s/sqrt(n), U = m + t s/sqrt(n) (Student t at the criterion's "
        "confidence). Reproduced when L clears the margin, not reproduced when U is at or below it, "
        "inconclusive in between or with fewer seeds than min_seeds. Within: on |m|. NaN or inf counts as "
        "the worst value."
    ),
    "premise": "a criterion about the testbed itself (the baseline learns, the task is not at ceiling, the regime occurs); judged like any criterion, shown first.",
    "evidence / design / cost": "evidence: an empirical comparison that could go either way; design: holds by construction and is checked for bugs (bit-exactness, identities); cost: speed or memory of our CPU code, reported, never deciding unless it opts in with a reason. Reproduced needs evidence.",
    "mde": "minimal detectable effect at the seeds used: (t_conf + t_0.8) s / sqrt(n), the smallest true difference the criterion detects with 80 % power.",
    "wall_s": "wall-clock seconds of all seeds of the claim check in one process (warm cache).",
    "cold_wall_s": "wall_s plus the recorded build time of every cached artefact the run found on disk: the cost on an empty cache.",
    "dirty": "the checkout had uncommitted or untracked changes when the run started.",
}


def glossary(results: list[dict[str, Any]]) -> dict[str, str]:
    terms = dict(GENERIC_GLOSSARY)
    for r in results:
        for name, text in r.get("glossary", {}).items():
            terms.setdefault(name, text)
        for name in r.get("metrics", {}):
            terms.setdefault(name, f"(defined in the {r['slug']} claim check; no glossary entry given)")
    return dict(sorted(terms.items()))
