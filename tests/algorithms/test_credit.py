"""Turn-level credit against brute-force float64 references on random episodes (mirl.algorithms.credit)."""

import math
import random

import pytest
import torch

from mirl.algorithms import (
    bilevel_gae,
    discounted_returns,
    grpo_advantages,
    step_group_advantages,
    turn_return_advantages,
    turn_values_on_tokens,
)

SEEDS = range(12)


def random_groups(rng: random.Random, P: int, K: int, U: int) -> list[list[list[float]]]:
    """rewards[p][k] = the turn rewards of one episode: 0..U turns, a third of the rewards exactly 0."""
    return [
        [[0.0 if rng.random() < 0.33 else rng.uniform(-1, 2) for _ in range(rng.randint(0, U))] for _ in range(K)]
        for _ in range(P)
    ]


def as_tensors(groups, U: int):
    P, K = len(groups), len(groups[0])
    rewards = torch.full((P, K, U), float("nan"), dtype=torch.float64)  # NaN where masked: must be ignored
    mask = torch.zeros(P, K, U, dtype=torch.bool)
    for p, group in enumerate(groups):
        for k, turns in enumerate(group):
            rewards[p, k, : len(turns)] = torch.tensor(turns, dtype=torch.float64)
            mask[p, k, : len(turns)] = True
    return rewards, mask


def ref_returns(turns: list[float], gamma: float) -> list[float]:
    return [sum(gamma ** (j - u) * turns[j] for j in range(u, len(turns))) for u in range(len(turns))]


def ref_turn_advantages(groups, gamma: float, scale: bool, eps: float = 1e-6):
    out = {}
    for p, group in enumerate(groups):
        returns = {k: ref_returns(turns, gamma) for k, turns in enumerate(group) if turns}
        if len(returns) < 2:
            out |= {(p, k, u): 0.0 for k, g in returns.items() for u in range(len(g))}
            continue
        mu = sum(sum(g) / len(g) for g in returns.values()) / len(returns)
        var = sum(sum((x - mu) ** 2 for x in g) / len(g) for g in returns.values()) / (len(returns) - 1)
        div = math.sqrt(var) + eps if scale else 1.0
        out |= {(p, k, u): (x - mu) / div for k, g in returns.items() for u, x in enumerate(g)}
    return out


def check_against(result: torch.Tensor, mask: torch.Tensor, expected: dict) -> None:
    assert result.dtype == torch.float64
    for (p, k, u), value in expected.items():
        assert result[p, k, u].item() == pytest.approx(value, rel=1e-9, abs=1e-9), (p, k, u)
    assert (result[~mask] == 0).all()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("gamma", "scale"), [(1.0, True), (0.9, True), (0.5, False)])
def test_turn_return_advantages_match_brute_force(seed, gamma, scale):
    rng = random.Random(seed)
    groups = random_groups(rng, P=3, K=4, U=5)
    rewards, mask = as_tensors(groups, 5)
    result = turn_return_advantages(rewards, mask, gamma=gamma, scale_by_std=scale)
    check_against(result, mask, ref_turn_advantages(groups, gamma, scale))


def ref_step_advantages(groups, states, gamma: float, weight: float, scale: bool):
    out = {}
    for p, group in enumerate(groups):
        totals = [sum(turns) for turns in group]
        mean = sum(totals) / len(totals)
        std = math.sqrt(sum((x - mean) ** 2 for x in totals) / (len(totals) - 1))
        episode = [(x - mean) / (std + 1e-6 if scale else 1.0) for x in totals]
        members: dict[int, list[tuple[int, int, float]]] = {}
        for k, turns in enumerate(group):
            for u, g in enumerate(ref_returns(turns, gamma)):
                key = states[p][k][u]
                members.setdefault(key if key >= 0 else -(1 + 1000 * k + u), []).append((k, u, g))
        for step_group in members.values():
            values = [g for _, _, g in step_group]
            m = sum(values) / len(values)
            s = math.sqrt(sum((x - m) ** 2 for x in values) / max(1, len(values) - 1))
            for k, u, g in step_group:
                step = 0.0 if len(values) == 1 else (g - m) / (s + 1e-6 if scale else 1.0)
                out[(p, k, u)] = episode[k] + weight * step
    return out


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("gamma", "weight", "scale"), [(1.0, 1.0, True), (0.95, 0.5, True), (0.8, 2.0, False)])
def test_step_group_advantages_match_brute_force(seed, gamma, weight, scale):
    rng = random.Random(100 + seed)
    groups = random_groups(rng, P=3, K=5, U=4)
    # few states so that step groups form; -1 = a turn without a state key
    states = [[[rng.choice([-1, 0, 1, 2]) for _ in range(4)] for _ in range(5)] for _ in range(3)]
    rewards, mask = as_tensors(groups, 4)
    ids = torch.tensor(states, dtype=torch.long)
    result = step_group_advantages(rewards, mask, ids, gamma=gamma, weight=weight, scale_by_std=scale)
    check_against(result, mask, ref_step_advantages(groups, states, gamma, weight, scale))


@pytest.mark.parametrize("seed", SEEDS)
def test_turn_credit_equals_episode_credit_when_only_the_last_turn_is_rewarded(seed):
    rng = random.Random(200 + seed)
    groups = [
        [[0.0] * rng.randint(0, 4) + [rng.choice([0.0, 1.0, rng.uniform(-1, 3)])] for _ in range(6)] for _ in range(4)
    ]
    rewards, mask = as_tensors(groups, 5)
    episode = grpo_advantages(torch.tensor([[sum(t) for t in g] for g in groups], dtype=torch.float64))  # (P, K)
    expected = torch.where(mask, episode[..., None], 0.0)  # every turn gets its episode's advantage
    torch.testing.assert_close(turn_return_advantages(rewards, mask), expected, rtol=1e-12, atol=1e-12)
    dr = grpo_advantages(torch.tensor([[sum(t) for t in g] for g in groups], dtype=torch.float64), scale_by_std=False)
    torch.testing.assert_close(
        turn_return_advantages(rewards, mask, scale_by_std=False), torch.where(mask, dr[..., None], 0.0)
    )


def test_step_groups_without_shared_states_are_episode_advantages():
    rewards = torch.tensor([[[0.5, 1.0], [0.0, -1.0], [2.0, 0.0]]])  # (1, 3, 2)
    mask = torch.ones(1, 3, 2, dtype=torch.bool)
    distinct = torch.arange(6).reshape(1, 3, 2)
    episode = grpo_advantages(rewards.sum(dim=2))  # returns 1.5, -1, 2
    torch.testing.assert_close(step_group_advantages(rewards, mask, distinct), episode[..., None].expand(1, 3, 2))


def test_a_state_revisited_at_other_depths_gets_step_signal_from_position_alone():
    # two samples whose every action is invalid: both stay in state 0 for 3 turns at -0.1 each, so the episodes tie
    # and the replies are equally bad, yet the one step group pools depths 0-2, whose returns-to-go differ
    rewards = torch.full((1, 2, 3), -0.1, dtype=torch.float64)
    mask = torch.ones(1, 2, 3, dtype=torch.bool)
    same_state = torch.zeros(1, 2, 3, dtype=torch.long)
    advantages = step_group_advantages(rewards, mask, same_state, gamma=0.95)
    assert torch.equal(advantages[0, 0], advantages[0, 1])  # no difference between the samples
    assert advantages[0, 0, 0] < 0 < advantages[0, 0, 2]  # the first turn blamed, the last credited: position only
    # keyed by (state, depth) instead, as a user can do by putting the turn index into info["state_key"]
    by_depth = torch.arange(3).expand(1, 2, 3)
    assert torch.count_nonzero(step_group_advantages(rewards, mask, by_depth, gamma=0.95)) == 0


def test_discounted_returns_skip_masked_turns_and_ignore_nan():
    rewards = torch.tensor([[[1.0, float("nan"), 2.0]]])
    mask = torch.tensor([[[True, False, True]]])
    # turn 0: 1 + 0.5 * 2 = 2 (the masked turn is skipped, not discounted); turn 2: 2
    assert discounted_returns(rewards, mask, 0.5).tolist() == [[[2.0, 0.0, 2.0]]]


# ---- bi-level GAE -----------------------------------------------------------------------------------------


def random_episodes(rng: random.Random, E: int):
    """Each episode: a list of turns, each turn (reward, [token values]); some turns earn exactly 0."""
    return [
        [
            (0.0 if rng.random() < 0.4 else rng.uniform(-1, 2), [rng.uniform(-1, 1) for _ in range(rng.randint(1, 4))])
            for _ in range(rng.randint(1, 4))
        ]
        for _ in range(E)
    ]


def ref_bilevel(episode, gammas, lams):
    """Per turn, the list of token advantages, by the docstring's recursions in plain floats."""
    (turn_gamma, gamma), (turn_lam, lam) = gammas, lams
    out, next_value, next_adv = [None] * len(episode), 0.0, 0.0
    for i in reversed(range(len(episode))):
        reward, values = episode[i]
        turn_adv = reward + turn_gamma * next_value - values[-1] + turn_gamma * turn_lam * next_adv
        tokens = [0.0] * len(values)
        tokens[-1] = turn_adv
        for t in reversed(range(len(values) - 1)):
            tokens[t] = gamma * values[t + 1] - values[t] + gamma * lam * tokens[t + 1]
        out[i], next_value, next_adv = tokens, values[-1], turn_adv
    return out


def layout(episodes, per_turn: bool, gap: int = 2):
    """Rows as collate makes them: one row per episode (env text of ``gap`` tokens between turns) or per turn;
    rows right-padded with NaN values. Returns tensors and, per (episode, turn), the (row, positions)."""
    rows, where = [], {}
    for e, episode in enumerate(episodes):
        groups = [[i] for i in range(len(episode))] if per_turn else [list(range(len(episode)))]
        for turns in groups:
            cells = [(None, None, None)] * gap  # prompt / env text
            for i in turns:
                start = len(cells)
                cells += [(i, episode[i][0] if t == len(episode[i][1]) - 1 else 0.0, v)
                          for t, v in enumerate(episode[i][1])]  # fmt: skip
                where[(e, i)] = (len(rows), list(range(start, len(cells))))
                cells += [(None, None, None)] * gap
            rows.append((e, cells))
    T = max(len(cells) for _, cells in rows)
    B = len(rows)
    rewards, values = torch.zeros(B, T, dtype=torch.float64), torch.full((B, T), float("nan"), dtype=torch.float64)
    mask, turn_ids = torch.zeros(B, T, dtype=torch.bool), torch.full((B, T), -1, dtype=torch.long)
    for b, (_, cells) in enumerate(rows):
        for t, (turn, reward, value) in enumerate(cells):
            if turn is not None:
                rewards[b, t], values[b, t], mask[b, t], turn_ids[b, t] = reward, value, True, turn
    episode_ids = torch.tensor([e for e, _ in rows], dtype=torch.long)
    return (rewards, values, mask, turn_ids, episode_ids), where


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("per_turn", [False, True])
@pytest.mark.parametrize(("gammas", "lams"), [((1.0, 1.0), (1.0, 1.0)), ((0.9, 0.99), (0.95, 0.8)), ((0.5, 1), (0, 1))])
def test_bilevel_gae_matches_brute_force(seed, per_turn, gammas, lams):
    rng = random.Random(300 + seed)
    episodes = random_episodes(rng, E=5)
    tensors, where = layout(episodes, per_turn)
    advantages, returns = bilevel_gae(*tensors, gammas=gammas, lams=lams)
    values, mask = tensors[1], tensors[2]
    for e, episode in enumerate(episodes):
        for i, expected in enumerate(ref_bilevel(episode, gammas, lams)):
            b, positions = where[(e, i)]
            got = advantages[b, positions].tolist()
            assert got == pytest.approx(expected, rel=1e-9, abs=1e-12)
            assert returns[b, positions].tolist() == pytest.approx(
                [a + v for a, v in zip(expected, episode[i][1], strict=True)], rel=1e-9, abs=1e-12
            )
    assert (advantages[~mask] == 0).all() and (returns[~mask] == 0).all()
    assert not values[mask].isnan().any()


def test_bilevel_gae_with_one_token_turns_and_unit_discounts_is_turn_level_gae():
    # one token per turn: the token level adds nothing; A_i = r_i + V_{i+1} - V_i + A_{i+1}
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.2, 0.4, 0.6]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    advantages, _ = bilevel_gae(rewards, values, mask, torch.tensor([[0, 1, 2]]), torch.tensor([0]))
    # A_2 = 1 - 0.6 = 0.4; A_1 = 0 + 0.6 - 0.4 + 0.4 = 0.6; A_0 = 0 + 0.4 - 0.2 + 0.6 = 0.8
    torch.testing.assert_close(advantages, torch.tensor([[0.8, 0.6, 0.4]]))


def test_turn_values_on_tokens_refuses_a_float_mask():
    with pytest.raises(TypeError, match="bool"):
        turn_values_on_tokens(torch.zeros(1, 1, 1), torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, 1,
                              dtype=torch.long), torch.ones(1, 1))  # fmt: skip


def test_bad_shapes_and_ranges_are_refused():
    rewards, mask = torch.zeros(2, 3, 4), torch.ones(2, 3, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"\(P, K, U\)"):
        turn_return_advantages(torch.zeros(2, 3), mask)
    with pytest.raises(ValueError, match="gamma must lie in"):
        turn_return_advantages(rewards, mask, gamma=1.5)
    with pytest.raises(ValueError, match="state_ids"):
        step_group_advantages(rewards, mask, torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="weight"):
        step_group_advantages(rewards, mask, torch.zeros(2, 3, 4, dtype=torch.long), weight=-1.0)
