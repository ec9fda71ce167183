"""Multi-turn agent substrate: KeyDoorGrid, TextWorld adapter, LM rollouts, step-level PPO, composition."""

import copy
import math

import gymnasium
import numpy as np
import pytest
import torch

from neurips26.common.agents import (
    ENV_ID,
    AgentPPOConfig,
    KeyDoorGrid,
    TextEnv,
    TextWorldEnv,
    Trajectory,
    collect_rollouts,
    evaluate_agent,
    generate_textworld_games,
    keydoor_env_factory,
    keydoor_expert_action,
    keydoor_layouts,
    keydoor_splits,
    keydoor_vocabulary,
    ppo_update,
    to_hashable,
    train_agent,
    word_tokenizer,
)
from neurips26.common.models import build_tiny_lm
from neurips26.common.rollouts import score_completions


@pytest.fixture(scope="module")
def layouts():
    return keydoor_layouts(6, seed=3, horizon=12)


@pytest.fixture(scope="module")
def tok():
    return word_tokenizer(keydoor_vocabulary())


def tiny_policy(tok, seed=0):
    return build_tiny_lm("llama", vocab_size=len(tok), seed=seed, hidden_size=32, intermediate_size=64)


def test_gymnasium_registration_and_env_checker(layouts):
    env = gymnasium.make(ENV_ID, layouts=layouts)
    obs, info = env.reset(seed=0, options={"layout": 1})
    assert obs.startswith("pos ") and info["anchor_obs"] == obs
    assert isinstance(env.unwrapped, TextEnv)
    from gymnasium.utils.env_checker import check_env

    check_env(KeyDoorGrid(layouts), skip_render_check=True)


def test_layouts_are_seeded_distinct_and_solvable():
    a = keydoor_layouts(20, seed=1)
    assert a == keydoor_layouts(20, seed=1) and a != keydoor_layouts(20, seed=2)
    assert len(set(a)) == 20
    assert all(4 <= lay.shortest_solution() <= 12 for lay in a)
    train, test = keydoor_splits(10, 10, seed=0)
    assert not set(train) & set(test)


def test_expert_solves_every_layout_and_reward_is_ten(layouts):
    env = KeyDoorGrid(layouts)
    for i, lay in enumerate(layouts):
        obs, info = env.reset(options={"layout": i})
        total, steps, done = 0.0, 0, False
        while not done:
            obs, r, term, trunc, info = env.step(keydoor_expert_action(lay, env.pos, env.has_key))
            total, steps, done = total + r, steps + 1, term or trunc
        assert info["won"] and total == 10.0 and steps == lay.shortest_solution()


def test_blocked_moves_self_loop_truncation_and_unknown_action(layouts):
    env = KeyDoorGrid(layouts, horizon=3)
    obs, info = env.reset(options={"layout": 0})
    blocked = [a for a in ("up", "down", "left", "right") if a not in info["admissible_commands"]]
    assert "pick" not in info["admissible_commands"] or env.pos == layouts[0].key
    if blocked:
        obs2, r, term, trunc, _ = env.step(blocked[0])
        assert obs2 == obs and r == 0 and not term
    env.reset(options={"layout": 0})
    for _ in range(3):
        *_, trunc, _ = env.step("pick" if env.pos != layouts[0].key else "up")
    assert trunc
    with pytest.raises(ValueError, match="unknown action"):
        env.step("fly")
    with pytest.raises(ValueError, match="action index"):
        env.step(7)
    phrase = KeyDoorGrid(layouts, phrasing="phrase")
    _, info = phrase.reset(options={"layout": 0})
    assert all(c.startswith(("go ", "pick up")) for c in info["admissible_commands"])


def test_rollouts_shapes_alignment_logprobs_and_determinism(layouts, tok):
    policy = tiny_policy(tok)
    make_env = keydoor_env_factory(layouts)
    batch = collect_rollouts(policy, tok, make_env, [0, 1], group_size=3, max_steps=5, seed=4)
    n = sum(len(t) for t in batch.trajectories)
    assert len(batch) == n == len(batch.group_ids) == batch.rewards.shape[0]
    assert batch.prompt_ids.shape[0] == batch.response_ids.shape[0] == n
    assert batch.traj_ids == sorted(batch.traj_ids)  # trajectory-major
    assert batch.invalid.any()  # a random tiny LM emits non-commands; they are recorded
    for row in range(n):
        traj = batch.trajectories[batch.traj_ids[row]]
        assert batch.anchor_keys[row] == to_hashable(traj.observations[batch.step_index[row]])
    scored = score_completions(
        policy, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask
    )
    diff = (scored["logprobs"] - batch.logprobs)[batch.response_mask].abs().max()
    assert float(diff.detach()) < 1e-5
    again = collect_rollouts(policy, tok, make_env, [0, 1], group_size=3, max_steps=5, seed=4)
    assert torch.equal(batch.response_ids, again.response_ids)  # same kernel: integer ids, rerun, same shapes and seed
    assert [t.actions for t in batch.trajectories] == [t.actions for t in again.trajectories]


def test_rank_mode_only_takes_admissible_commands(layouts, tok):
    policy = tiny_policy(tok)
    batch = collect_rollouts(
        policy, tok, keydoor_env_factory(layouts), [2], group_size=4, max_steps=6, action_mode="rank"
    )
    assert not batch.invalid.any()
    assert batch.stats["env_steps"] == len(batch)
    ev = evaluate_agent(policy, tok, keydoor_env_factory(layouts), [0, 1], action_mode="rank")
    assert 0.0 <= ev["success"] <= 1.0 and ev["invalid_rate"] == 0.0


def test_ppo_update_zero_advantage_leaves_policy_unchanged_and_nonzero_moves_it(layouts, tok):
    policy = tiny_policy(tok)
    batch = collect_rollouts(policy, tok, keydoor_env_factory(layouts), [0], group_size=2, max_steps=3)
    before = copy.deepcopy(policy.state_dict())
    cfg = AgentPPOConfig(kl_coef=0.0, invalid_penalty=0.0)
    ppo_update(
        policy, torch.optim.Adam(policy.parameters(), 1e-2), batch, torch.zeros(len(batch)), config=cfg
    )
    assert all(torch.equal(before[k], v) for k, v in policy.state_dict().items())  # same kernel: zero advantage: zero gradients and a zero Adam step leave the bits
    stats = ppo_update(
        policy, torch.optim.Adam(policy.parameters(), 1e-2), batch, torch.ones(len(batch)), config=cfg
    )
    assert math.isfinite(stats["loss"])
    assert any(not torch.equal(before[k], v) for k, v in policy.state_dict().items())  # same kernel: n/a, asserts a difference
    with pytest.raises(ValueError, match="one per step"):
        ppo_update(policy, torch.optim.Adam(policy.parameters()), batch, torch.zeros(len(batch) + 1))
    with pytest.raises(ValueError, match="NaN"):
        ppo_update(
            policy, torch.optim.Adam(policy.parameters()), batch, torch.full((len(batch),), float("nan"))
        )


def _train(tok, layouts, estimator, transform=None, loss_fn=None, iterations=2):
    policy = tiny_policy(tok, seed=1)
    ref = copy.deepcopy(policy)
    out = train_agent(
        policy, tok, keydoor_env_factory(layouts), lambda it: [it % 3, 3 + it % 3], estimator,
        env_step_budget=10_000, max_iterations=iterations, group_size=4, max_steps=6, transform=transform,
        loss_fn=loss_fn, ref_model=ref, seed=2,
    )  # fmt: skip
    return policy, out


def _params(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_composition_rewardflow_aem_archer_and_reductions(layouts, tok):
    from neurips26.rl.aem import AEMConfig, aem_transform
    from neurips26.rl.archer import ArcherConfig, archer_policy_loss
    from neurips26.rl.rewardflow import RewardFlowConfig, make_estimator

    full, out = _train(
        tok, layouts, make_estimator("rewardflow"), aem_transform(AEMConfig()),
        lambda lp, old, a, m, e, ref: archer_policy_loss(lp, old, a, m, e, ref, ArcherConfig()),
    )  # fmt: skip
    assert out["iterations"] == 2 and torch.isfinite(_params(full)).all()
    assert all(math.isfinite(x) for x in out["curves"]["loss"])
    plain, _ = _train(tok, layouts, make_estimator("rewardflow"))
    # AEM off (lam = 0) equals the host estimator exactly
    aem_off, _ = _train(tok, layouts, make_estimator("rewardflow"), aem_transform(AEMConfig(lam=0.0)))
    assert torch.equal(_params(aem_off), _params(plain))  # same kernel: lam = 0 returns the advantages
    # RewardFlow with step_weight = 0 equals GRPO exactly
    rf0, _ = _train(tok, layouts, make_estimator("rewardflow", RewardFlowConfig(step_weight=0.0)))
    grpo, _ = _train(tok, layouts, make_estimator("grpo"))
    assert torch.equal(_params(rf0), _params(grpo))  # same kernel: GRPO is step_weight = 0
    # Archer with its split off and the trainer's clip/KL equals the default PPO-clip loss
    archer_off = ArcherConfig.grpo(dual_clip_c=None, kl_coef_knowledge=0.01, kl_coef_reasoning=0.01)
    arch, _ = _train(
        tok, layouts, make_estimator("rewardflow"), None,
        lambda lp, old, a, m, e, ref: archer_policy_loss(lp, old, a, m, e, ref, archer_off),
    )  # fmt: skip
    torch.testing.assert_close(_params(arch), _params(plain), rtol=1e-5, atol=1e-6)
    assert not torch.equal(_params(full), _params(plain))  # same kernel: n/a, asserts a difference


def test_train_agent_respects_env_step_budget(layouts, tok):
    from neurips26.rl.rewardflow import make_estimator

    policy = tiny_policy(tok)
    out = train_agent(
        policy, tok, keydoor_env_factory(layouts), lambda it: [0], make_estimator("gigpo"), env_step_budget=10,
        group_size=2, max_steps=4,
    )  # fmt: skip
    assert out["env_steps"] >= 10 > out["curves"]["env_steps"][-2]
    assert out["curves"]["env_steps"] == sorted(out["curves"]["env_steps"])


def test_trajectory_and_hashable_errors():
    with pytest.raises(ValueError, match="lengths disagree"):
        Trajectory("g", ["a"], ["x"], [0.0])
    with pytest.raises(TypeError, match="group_id"):
        Trajectory(["g"], ["a", "b"], ["x"], [0.0])
    assert to_hashable({"b": [1, 2], "a": np.array([3])}) == (("a", (3,)), ("b", (1, 2)))
    with pytest.raises(ValueError, match="layouts|horizon"):
        KeyDoorGrid(horizon=0)


def test_textworld_game_generated_reset_stepped_and_ranked(tmp_path, tok):
    (game,) = generate_textworld_games(1, seed=0, difficulty=1)
    assert game.is_file()
    assert generate_textworld_games(1, seed=0, difficulty=1) == [game]  # cached
    env = TextWorldEnv(game, max_steps=20)
    obs, info = env.reset()
    assert obs and info["admissible_commands"] and not info["won"]
    total, done = 0.0, False
    for cmd in info["policy_commands"]:  # the walkthrough wins
        obs, r, done, trunc, info = env.step(cmd)
        total += r
    assert info["won"] and done and total == 10.0
    words = sorted({w for c in info["admissible_commands"] for w in c.split()} | set(keydoor_vocabulary()))
    wtok = word_tokenizer(words)
    policy = tiny_policy(wtok)
    batch = collect_rollouts(
        policy, wtok, lambda task: (TextWorldEnv(game, max_steps=3), None), ["g0"], group_size=2, max_steps=3,
        action_mode="rank",
    )  # fmt: skip
    assert len(batch) == 6 and not batch.invalid.any()
    with pytest.raises(ValueError, match="non-empty command"):
        env.step("")
    with pytest.raises(ValueError, match="does not exist"):
        TextWorldEnv(tmp_path / "missing.z8")
    with pytest.raises(ValueError, match="difficulty"):
        generate_textworld_games(1, seed=0, difficulty=9)


def test_env_batch_api_and_throughput(layouts):
    from neurips26.common.agents import EnvBatch, env_steps_per_second, make_env_batch

    batch = make_env_batch(keydoor_env_factory(layouts), [(0, None), (1, None)])
    assert isinstance(batch, EnvBatch)
    (o0, i0), (o1, _) = batch.reset()
    assert o0 != o1
    ((obs, r, term, trunc, info),) = batch.step([0], [i0["admissible_commands"][0]])
    assert obs != o0 and r == 0.0
    with pytest.raises(ValueError, match="indices"):
        batch.step([0, 1], ["up"])
    with pytest.raises(ValueError, match="executor"):
        make_env_batch(keydoor_env_factory(layouts), [(0, None)], executor="threads")
    stats = env_steps_per_second(keydoor_env_factory(layouts), [0, 1], episodes_per_task=2, steps=3)
    assert stats["env_steps"] > 0 and stats["env_steps_per_s"] > 0


@pytest.mark.slow
def test_two_ray_actors_give_the_same_trajectories_as_in_process(layouts, tok):
    pytest.importorskip("ray")
    policy = tiny_policy(tok)
    kw = dict(group_size=3, max_steps=6, seed=1, action_mode="rank", env_seed=5)
    local = collect_rollouts(policy, tok, keydoor_env_factory(layouts), [0, 1, 2], **kw)
    remote = collect_rollouts(
        policy, tok, keydoor_env_factory(layouts), [0, 1, 2], executor="ray", num_workers=2, **kw
    )
    assert [t.actions for t in local.trajectories] == [t.actions for t in remote.trajectories]
    assert [t.observations for t in local.trajectories] == [t.observations for t in remote.trajectories]
    # same kernel: the same policy weights and seeds in Ray workers on this machine
    assert torch.equal(local.response_ids, remote.response_ids)  # same kernel
    assert torch.equal(local.rewards, remote.rewards)  # same kernel


@pytest.fixture(scope="module")
def tw_game():
    (game,) = generate_textworld_games(1, seed=0, difficulty=1)
    return game


def test_textworld_compact_observation_anchor_pool_and_bc_data(tw_game):
    from neurips26.common.agents import (
        normalize_text,
        textworld_bc_examples,
        textworld_env_factory,
        textworld_vocabulary,
    )

    assert normalize_text("That's it! Comic-Strip  Calendar") == "that s it comic strip calendar"
    env = TextWorldEnv(tw_game, max_steps=20, compact=True)
    obs, info = env.reset()
    assert obs.startswith("goal ") and " | room " in obs and " | carrying " in obs
    assert all(w == normalize_text(w) for w in obs.split() if w != "|")
    assert "task for today" not in obs  # template filler dropped from the objective
    anchor0 = info["anchor_obs"]
    assert isinstance(anchor0, tuple) and anchor0 == tuple(sorted(anchor0))  # sorted logical facts
    for cmd in info["policy_commands"]:
        obs, r, done, trunc, info = env.step(cmd)
    assert info["won"] and done and r == 10.0 and info["anchor_obs"] != anchor0
    again, info2 = env.reset()
    assert info2["anchor_obs"] == anchor0  # the anchor is the game state, not the history
    vocab = textworld_vocabulary([tw_game])
    tok = word_tokenizer(vocab, normalize=True)
    assert tok.unk_token_id not in tok(again)["input_ids"]  # every observation word is in the vocabulary
    assert tok("Go EAST!")["input_ids"] == tok("go east")["input_ids"]
    ex = textworld_bc_examples([tw_game], tok, episodes_per_game=2, seed=3, expert_prob=1.0, max_steps=8)
    assert ex == textworld_bc_examples(
        [tw_game], tok, episodes_per_game=2, seed=3, expert_prob=1.0, max_steps=8
    )
    assert len(ex) == 2 * len(info2["policy_commands"])  # pure walkthrough: the shortest solution twice
    for row in ex:
        assert len(row["input_ids"]) == len(row["loss_mask"]) and row["loss_mask"][-1] == 1
        assert row["input_ids"][-1] == tok.eos_token_id
    # pooled interpreters give the same trajectories as fresh ones
    policy = tiny_policy(tok)
    kw = dict(group_size=3, max_steps=4, action_mode="rank", seed=5)
    pooled = textworld_env_factory([tw_game], max_steps=4)
    a = collect_rollouts(policy, tok, pooled, [0], **kw)
    b = collect_rollouts(policy, tok, pooled, [0], **kw)  # second round reuses the pooled envs
    c = collect_rollouts(policy, tok, textworld_env_factory([tw_game], max_steps=4, pool=False), [0], **kw)
    assert [t.actions for t in a.trajectories] == [t.actions for t in b.trajectories]
    assert [t.observations for t in a.trajectories] == [t.observations for t in c.trajectories]
    assert a.scores.shape == (3,) and ((a.scores >= 0) & (a.scores <= 1)).all()
    with pytest.raises(ValueError, match="task"):
        pooled(3)
    with pytest.raises(ValueError, match="game_files"):
        textworld_env_factory([])


def test_textworld_trainer_runs_two_iterations_end_to_end(tw_game):
    """GRPO, GiGPO and RewardFlow step-level PPO on one cached TextWorld game: two iterations each."""
    from neurips26.common.agents import textworld_env_factory, textworld_vocabulary
    from neurips26.rl.rewardflow import make_estimator

    tok = word_tokenizer(textworld_vocabulary([tw_game]), normalize=True)
    make_env = textworld_env_factory([tw_game], max_steps=5)
    for name in ("grpo", "gigpo", "rewardflow"):
        policy = tiny_policy(tok, seed=2)
        before = _params(policy).clone()
        out = train_agent(
            policy, tok, make_env, lambda it: [0], make_estimator(name), env_step_budget=10_000,
            max_iterations=2, group_size=3, max_steps=5, action_mode="rank", ref_model=copy.deepcopy(policy),
            seed=1,
        )  # fmt: skip
        assert out["iterations"] == 2 and all(math.isfinite(x) for x in out["curves"]["loss"])
        moved = not torch.equal(_params(policy), before)  # same kernel: n/a, asserts a difference
        # the policy moves exactly when some step got a non-zero advantage (no KL force at the start)
        assert torch.isfinite(_params(policy)).all() and moved == (max(out["curves"]["nonzero_adv"]) > 0)
        assert out["env_steps"] == out["curves"]["env_steps"][-1] > 0
    ev = evaluate_agent(policy, tok, make_env, [0], episodes_per_task=2, max_steps=5, action_mode="rank")
    assert set(ev) >= {"success", "score", "invalid_rate"} and ev["invalid_rate"] == 0.0


def test_textworld_text_helpers_reject_bad_input(tmp_path):
    from neurips26.common.agents import normalize_text, textworld_bc_examples, textworld_vocabulary

    with pytest.raises(TypeError, match="text must be a str"):
        normalize_text(3)
    with pytest.raises(ValueError, match="game_files must not be empty"):
        textworld_vocabulary([])
    with pytest.raises(TypeError, match="game_files must be a sequence"):
        textworld_vocabulary("game.z8")
    with pytest.raises(ValueError, match="no such game file"):
        textworld_vocabulary([tmp_path / "missing.z8"])
    with pytest.raises(ValueError, match="no such game file"):
        textworld_bc_examples([tmp_path / "missing.z8"], None, episodes_per_game=1, seed=0)
    for kwargs, name in (
        (dict(episodes_per_game=0, seed=0), "episodes_per_game"),
        (dict(episodes_per_game=1, seed=-1), "seed"),
        (dict(episodes_per_game=1, seed=0, max_steps=0), "max_steps"),
        (dict(episodes_per_game=1, seed=0, expert_prob=1.5), "expert_prob"),
    ):
        with pytest.raises(ValueError, match=name):
            textworld_bc_examples([tmp_path / "missing.z8"], None, **kwargs)


def test_textworld_anonymized_observation_commands_and_walkthrough(tw_game):
    from neurips26.common.agents import (
        anonymize_text,
        entity_placeholders,
        placeholder_words,
        textworld_bc_examples,
        textworld_vocabulary,
    )

    names = entity_placeholders(
        [("o", "Soap Dispenser"), ("s", "rack"), ("o", "bug"), ("r", "Garage")], "Put the bug on the rack."
    )
    assert names == {
        "bug": "o1",
        "soap dispenser": "o2",
        "rack": "s1",
        "garage": "r1",
    }  # objective order first
    assert anonymize_text("take Soap Dispenser from rack", names) == "take o2 from s1"
    assert anonymize_text("examine rack rack", names) == "examine s1 s1"
    env = TextWorldEnv(tw_game, max_steps=20, compact=True, anonymize=True)
    plain = TextWorldEnv(tw_game, max_steps=20, compact=True)
    obs, info = env.reset()
    obs_plain, info_plain = plain.reset()
    vocab = set(placeholder_words())
    assert info["anchor_obs"] == info_plain["anchor_obs"]  # the anchor state is the game's facts either way
    assert obs != obs_plain and obs.split(" | room ")[1].split()[0] in vocab  # the room is a placeholder
    assert len(info["admissible_commands"]) == len(info_plain["admissible_commands"])
    for cmd in info["policy_commands"]:  # the anonymised walkthrough still wins through step()
        assert cmd in info["admissible_commands"]
        obs, r, done, trunc, info = env.step(cmd)
    assert info["won"] and done and r == 10.0
    tok = word_tokenizer(textworld_vocabulary([tw_game], placeholders=True), normalize=True)
    assert tok.unk_token_id not in tok(obs)["input_ids"]
    ex = textworld_bc_examples([tw_game], tok, episodes_per_game=1, seed=0, expert_prob=1.0, anonymize=True)
    assert len(ex) == len(info_plain["policy_commands"])
    with pytest.raises(ValueError, match="anonymize"):
        TextWorldEnv(tw_game, compact=False, anonymize=True)
