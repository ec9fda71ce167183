"""Archer claim check: structure (arms incl. the SFT reference, premises, headlines, budget), the judged
run trains every arm through ArcherGRPOTrainer (TRL's loop), loss-overhead benchmark. Generic smoke
checks (finiteness, determinism, glossary, plot): test_conformance.py."""

from __future__ import annotations

from neurips26.claims.archer import ARM_SETTINGS, ARMS, CLAIM, REFERENCE, grpo_args, loss_overhead, run


def test_smoke_structure_and_budget(smoke_result):
    first = smoke_result("archer")
    assert set(CLAIM.arms) == {*ARMS, REFERENCE}
    for name in ("pass@1", "pass@8", "arith_correct", "final_entropy"):
        assert set(first["metrics"][name]) == {*ARMS, REFERENCE}, name
    assert set(first["metrics"]["reward_gain"]) == set(ARMS)
    for name in ("reasoning_frac", "clip_widened_frac", "kl_knowledge", "entropy_ratio"):
        assert set(first["metrics"][name]) == {"archer"}, name  # regime metrics of Archer's own loss
    for name in ("pass@1", "pass@8", "arith_correct"):
        assert all(0.0 <= v <= 1.0 for vals in first["metrics"][name].values() for v in vals)
    assert all(0.05 <= v <= 0.35 for v in first["metrics"]["reasoning_frac"]["archer"])
    info = first["info"][0]
    for arm in ARMS:
        assert info["arms"][arm]["finite"]
        assert info["arms"][arm]["trainer_class"] == "ArcherGRPOTrainer"
        assert info["arms"][arm]["policy_loss"] == ARM_SETTINGS[arm]["policy_loss"]
    assert set(first["curves"]["entropy"]) == set(ARMS)
    # every RL arm gets the same budget
    budgets = info["budget"]
    assert set(budgets) == set(ARMS)
    assert len({tuple(sorted((k, str(v)) for k, v in b.items())) for b in budgets.values()}) == 1


def test_judged_run_trains_through_archer_trainer(monkeypatch):
    """Every arm's loss runs inside ArcherGRPOTrainer._compute_loss during Trainer.train(): Archer's
    through archer_policy_loss, GRPO/DAPO through TRL's own loss of the same class."""
    from neurips26.rl import archer as rl_archer

    cls = rl_archer.ArcherGRPOTrainer
    compute_loss, training_step, archer_loss = (
        cls._compute_loss,
        cls.training_step,
        rl_archer.archer_policy_loss,
    )
    calls: list[str] = []
    steps: list[str] = []
    archer_calls: list[int] = []

    def spy_compute_loss(self, model, inputs):
        calls.append(self.policy_loss)
        return compute_loss(self, model, inputs)

    def spy_training_step(self, *args, **kwargs):
        steps.append(self.policy_loss)
        return training_step(self, *args, **kwargs)

    def spy_archer_loss(*args, **kwargs):
        archer_calls.append(1)
        return archer_loss(*args, **kwargs)

    monkeypatch.setattr(cls, "_compute_loss", spy_compute_loss)
    monkeypatch.setattr(cls, "training_step", spy_training_step)
    monkeypatch.setattr(rl_archer, "archer_policy_loss", spy_archer_loss)
    config = dict(CLAIM.configs["smoke"], workers=1)  # in-process, so the spies see the calls
    result = run(config, 0)
    per_arm = config["rl_steps"] * config["minibatches"] * config["ppo_epochs"]
    expected = [ARM_SETTINGS[arm]["policy_loss"] for arm in config["arms"] for _ in range(per_arm)]
    assert calls == expected and steps == expected
    assert len(archer_calls) == per_arm * sum(
        ARM_SETTINGS[a]["policy_loss"] == "archer" for a in config["arms"]
    )
    for arm in config["arms"]:
        assert result.info["arms"][arm]["loss_calls"] == per_arm
        assert result.info["arms"][arm]["optimizer_steps"] == per_arm
    # the judged profile runs the same arms through the same function (workers only fork processes)
    assert CLAIM.configs["full"]["arms"] == config["arms"] == ARMS


def test_arms_differ_only_in_the_loss(tmp_path):
    """The GRPOConfig of every arm is the shared budget plus the arm's loss fields."""
    config = CLAIM.configs["full"]
    args = {arm: grpo_args(arm, config, 0, str(tmp_path / arm)).to_dict() for arm in ARM_SETTINGS}
    loss_fields = {k for s in ARM_SETTINGS.values() for k in s["grpo"]} | {"output_dir", "logging_dir"}
    shared = [{k: v for k, v in a.items() if k not in loss_fields} for a in args.values()]
    assert all(s == shared[0] for s in shared)
    a = args["archer"]
    assert a["bf16"] is False and a["num_iterations"] == config["ppo_epochs"]
    assert a["max_steps"] == config["rl_steps"] * config["minibatches"] * config["ppo_epochs"]
    assert a["per_device_train_batch_size"] * a["steps_per_generation"] == (
        config["prompts_per_step"] * config["group_size"]
    )
    assert args["dapo"]["loss_type"] == "dapo" and args["dapo"]["epsilon_high"] == 0.28
    assert args["dapo"]["beta"] == 0.0 and args["grpo"]["beta"] == 1e-3


def test_parallel_arms_match_sequential():
    config = dict(CLAIM.configs["smoke"], arms=("archer", "dapo"))
    seq = run(dict(config, workers=1), 0)
    par = run(dict(config, workers=2), 0)
    assert seq.metrics == par.metrics
    assert seq.curves == par.curves


def test_declarations():
    labels = {c.label for c in (*CLAIM.premises, *CLAIM.criteria)}
    assert all(c.label for c in (*CLAIM.premises, *CLAIM.criteria))
    premises = {p.label for p in CLAIM.premises}
    assert {"sft_not_too_weak", "sft_not_too_strong", "grpo_learns", "grpo_not_at_ceiling"} <= premises
    assert {"high_entropy_tokens_exist", "wide_clip_acts", "knowledge_kl_acts"} <= premises
    assert any(c.kind == "evidence" for c in CLAIM.criteria)
    assert CLAIM.headlines and all(set(h.criteria) <= labels for h in CLAIM.headlines)
    assert [h.primary for h in CLAIM.headlines] == [True, False, False]
    assert {c.metric for c in (*CLAIM.criteria, *CLAIM.premises)} <= set(CLAIM.glossary)
    assert len(CLAIM.seeds["full"]) >= 3
    full = CLAIM.configs["full"]
    assert full["n_eval"] == CLAIM.items["pass@1"]["full"]
    for profile in ("smoke", "quick", "full"):
        assert CLAIM.configs[profile]["n_eval"] == CLAIM.items["pass@1"][profile]


def test_loss_overhead_benchmark_runs():
    out = loss_overhead(batch=8, length=6, vocab=10, repeats=2)
    assert out["archer_loss_s"] > 0 and out["grpo_loss_s"] > 0 and out["archer_over_grpo"] > 0
