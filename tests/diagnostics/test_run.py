"""The in-training entry point: schedule, EMA state, catalogue keys, and agreement with the pieces it wires."""

import doctest
import math

import pytest
import torch

from mirl.catalogue import unknown_keys
from mirl.config import DiagnosticsConfig
from mirl.diagnostics import REGIMES, mi_proxies, run
from mirl.diagnostics.run import DiagnosticsState, is_scheduled, run_diagnostics
from mirl.diagnostics.sampling import answer_span, first_turn_pairs, trajectory_pairs
from mirl.diagnostics.scoring import score_matrix
from mirl.policy.tiny import tiny_policy

from .helpers import TOK, grid_episodes, make_episode, make_turn


@pytest.fixture(scope="module")
def policy():
    return tiny_policy(seed=2)


@pytest.fixture(scope="module")
def episodes():
    return grid_episodes(num_groups=3, samples=2, num_turns=2)


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_doctests():
    assert doctest.testmod(run).failed == 0


def test_schedule_is_iteration_one_and_every_multiple():
    assert [i for i in range(1, 21) if is_scheduled(i, 5)] == [1, 5, 10, 15, 20]
    assert [i for i in range(1, 5) if is_scheduled(i, 1)] == [1, 2, 3, 4]
    assert [i for i in range(1, 8) if is_scheduled(i, 3)] == [1, 3, 6]
    assert not any(is_scheduled(i, 0) for i in range(1, 10))  # 0 = off
    with pytest.raises(ValueError, match="1-based"):
        is_scheduled(0, 5)
    with pytest.raises(ValueError, match="every must be an int >= 0"):
        is_scheduled(1, -1)


def test_state_keeps_one_ema_per_scope_and_family_and_round_trips():
    state = DiagnosticsState(decay=0.5)
    state.ema("first_turn", "est").update(2.0)
    state.ema("first_turn", "est").update(4.0)  # 0.5 * 2 + 0.5 * 4 = 3
    state.ema("trajectory", "seq").update(10.0)
    assert state.ema("first_turn", "est").s_ema == 3.0
    assert state.ema("first_turn", "seq").s_ema is None  # a different family is a different average
    restored = DiagnosticsState()
    restored.load_state_dict(state.state_dict())
    assert restored.state_dict() == state.state_dict() and restored.decay == 0.5
    with pytest.raises(ValueError, match="keys \\['decay', 'emas'\\]"):
        restored.load_state_dict({"decay": 0.9})


def test_run_returns_exactly_catalogue_keys_for_every_scope_and_family(policy, episodes):
    # 3 distinct prompts per scope: below the default regime_min_columns (4), so allow 2 to see the quadrants
    config = DiagnosticsConfig(scopes=["first_turn", "trajectory", "turn_position"], num_pairs=8, regime_min_columns=2)
    out = run_diagnostics(policy, episodes, config, DiagnosticsState(), generator=gen())
    assert unknown_keys(out) == []
    for scope in ("first_turn", "trajectory", "turn1", "turn2"):
        for family in ("est", "seq"):
            for stat in ("mi_estimate", "conditional_entropy", "reasoning_entropy", "mi_zscore_ema", "retrieval_acc@8"):
                assert isinstance(out[f"diag/{scope}/{family}/{stat}"], float)
        assert out[f"diag/{scope}/regime"] in REGIMES
    # first turn: 6 pairs over 3 group columns; trajectory: 8 draws, each its own column; turn t: 6 pairs
    assert (out["diag/first_turn/pairs"], out["diag/first_turn/columns"]) == (6.0, 3.0)
    assert (out["diag/trajectory/pairs"], out["diag/trajectory/columns"]) == (8.0, 8.0)
    assert (out["diag/turn2/pairs"], out["diag/turn2/columns"], out["diag/turn2/empty_reasoning"]) == (6.0, 6.0, 0.0)
    assert out["diag/first_turn/est/mi_upper_bound"] == pytest.approx(math.log(3))


def test_run_agrees_with_sampler_scorer_and_proxies_wired_by_hand(policy, episodes):
    config = DiagnosticsConfig(scopes=["first_turn", "trajectory"], num_pairs=8, ks=[1, 2])
    out = run_diagnostics(policy, episodes, config, DiagnosticsState(), generator=gen(7))
    generator = gen(7)  # the same draws, in the same order
    for pair_set in (
        first_turn_pairs(episodes, num_pairs=8, generator=generator),
        trajectory_pairs(episodes, num_pairs=8, generator=generator),
    ):
        per_seq, per_token = score_matrix(policy, pair_set.columns, pair_set.reasonings)
        group = torch.tensor(pair_set.col_group)
        for family, matrix in (("est", per_token), ("seq", per_seq)):
            expected = mi_proxies(matrix, pair_set.true_col, col_group=group, ks=(1, 2))
            for stat, value in expected.items():
                assert out[f"diag/{pair_set.scope}/{family}/{stat}"] == pytest.approx(value, rel=1e-9, abs=1e-12)


def test_ema_state_carries_across_calls(policy, episodes):
    config = DiagnosticsConfig(scopes=["trajectory"], num_pairs=8, ema_decay=0.9)
    state = DiagnosticsState.from_config(config)
    first = run_diagnostics(policy, episodes, config, state, generator=gen(1))
    second = run_diagnostics(policy, episodes, config, state, generator=gen(2))
    s1, s2 = first["diag/trajectory/est/marginal_std"], second["diag/trajectory/est/marginal_std"]
    assert state.ema("trajectory", "est").s_ema == pytest.approx(0.9 * s1 + 0.1 * s2)
    assert first["diag/trajectory/est/mi_zscore_ema"] == pytest.approx(first["diag/trajectory/est/mi_zscore"])


def test_scopes_with_fewer_than_two_prompts_are_undetermined(policy):
    one_group = [make_episode(0, k, [make_turn("same prompt", f"plan {k}")]) for k in range(3)]
    one_group.append(make_episode(0, 3, [make_turn("same prompt", "")]))
    config = DiagnosticsConfig(scopes=["first_turn", "trajectory"], num_pairs=4)
    state = DiagnosticsState()
    out = run_diagnostics(policy, one_group, config, state, generator=gen())
    assert out == {
        "diag/invalid_frac": 0.0,  # every reply of make_turn parses
        "diag/first_turn/pairs": 3.0,
        "diag/first_turn/columns": 1.0,
        "diag/first_turn/empty_reasoning": 1.0,
        "diag/first_turn/copied_reasoning": 0.0,
        "diag/first_turn/entropy_temperature": 1.0,
        "diag/first_turn/sample_temperature": 1.0,
        "diag/first_turn/regime": "undetermined",
        # 4 draws over 3 identical contexts: 4 columns, 1 distinct prompt
        "diag/trajectory/pairs": 4.0,
        "diag/trajectory/columns": 4.0,
        "diag/trajectory/empty_reasoning": 1.0,
        "diag/trajectory/copied_reasoning": 0.0,
        "diag/trajectory/entropy_temperature": 1.0,
        "diag/trajectory/sample_temperature": 1.0,
        "diag/trajectory/regime": "undetermined",
    }
    assert state.emas == {}


EXAMPLE = "I read the state and pick the move that helps."


def test_reasoning_that_copies_the_format_example_is_counted_and_not_judged(policy):
    # 5 groups x 2 samples; in 6 of the 10 episodes the reasoning is the example (two with other case and spacing)
    copies = [EXAMPLE, EXAMPLE, " i read the state, and pick the move that helps ", EXAMPLE.upper(), EXAMPLE, EXAMPLE]
    own = ["I see a hole left.", "Goal is two steps down.", "Right then down.", "Avoid the hole at row 2."]
    episodes = [
        make_episode(g, k, [make_turn(f"State {g} {'_' * g}", (copies + own)[2 * g + k])])
        for g in range(5)
        for k in range(2)
    ]
    config = DiagnosticsConfig(scopes=["first_turn"], num_pairs=10)
    out = run_diagnostics(
        policy, episodes, config, DiagnosticsState(), generator=gen(), sample_temperature=0.7, format_reasoning=EXAMPLE
    )
    assert out["diag/first_turn/copied_reasoning"] == 6.0 and out["diag/first_turn/pairs"] == 10.0
    assert out["diag/first_turn/sample_temperature"] == 0.7
    assert out["diag/first_turn/regime"] == "no_reasoning"  # 6 of 10 candidate turns copied >= half
    assert isinstance(out["diag/first_turn/est/mi_estimate"], float)  # still scored: the numbers stay visible
    without = run_diagnostics(policy, episodes, config, DiagnosticsState(), generator=gen())
    assert without["diag/first_turn/copied_reasoning"] == 0.0 and without["diag/first_turn/regime"] != "no_reasoning"


def test_action_dependence_families_score_the_answer_tokens(policy, episodes):
    config = DiagnosticsConfig(scopes=["first_turn"], num_pairs=8, action_dependence=True)
    out = run_diagnostics(policy, episodes, config, DiagnosticsState(), generator=gen())
    assert unknown_keys(out) == []
    for family in ("za_est", "za_seq", "xa_est", "xa_seq"):
        assert f"diag/first_turn/{family}/mi_estimate" in out
    assert out["diag/first_turn/za_est/regime"] in REGIMES and out["diag/first_turn/xa_est/regime"] in REGIMES
    # za: 6 rows, each reasoning its own column; xa: the 3 group columns
    assert out["diag/first_turn/za_est/mi_upper_bound"] == pytest.approx(math.log(6))
    assert out["diag/first_turn/xa_est/mi_upper_bound"] == pytest.approx(math.log(3))
    # both matched cells are the sampled stream itself: log p(A_i | X_i, lead_i, Z_i, bridge_i) / |A_i|
    direct = []
    for episode in episodes:  # 6 candidates <= 8 pairs: every first turn is a row, in episode order
        turn = episode.turns[0]
        start, end = answer_span(TOK, turn.response_ids)
        logp = policy.score([turn.context_ids + turn.response_ids[:start]], [turn.response_ids[start:end]])[0]
        direct.append(logp.double().mean().item())
    expected = sum(direct) / len(direct)
    assert out["diag/first_turn/za_est/matched_mean"] == pytest.approx(expected, rel=1e-6)
    assert out["diag/first_turn/xa_est/matched_mean"] == pytest.approx(expected, rel=1e-6)


def test_progress_says_the_total_first_and_ends_there(policy, episodes):
    config = DiagnosticsConfig(scopes=["first_turn", "trajectory"], num_pairs=6, action_dependence=True)
    calls: list[tuple[int, int]] = []
    tracked = run_diagnostics(
        policy, episodes, config, DiagnosticsState(), generator=gen(), progress=lambda *a: calls.append(a)
    )
    plain = run_diagnostics(policy, episodes, config, DiagnosticsState(), generator=gen())
    assert tracked == plain
    total = calls[0][1]
    assert calls[0] == (0, total) and calls[-1] == (total, total) and total > 0
    assert all(t == total for _, t in calls)  # the total is known before scoring starts, action matrices included
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)


def test_open_reasoning_scores_the_replies_that_never_closed_think(policy):
    import dataclasses

    # every reply of three prompts stops before </think>: closed sees no Z at all, open scores them all
    unclosed = []
    for episode in grid_episodes(num_groups=3, samples=2, num_turns=1):
        turn = episode.turns[0]
        ids = tuple(TOK.encode(TOK.decode(list(turn.reasoning_ids))))
        turn = dataclasses.replace(turn, response_ids=ids, response_logprobs=(0.0,) * len(ids), reasoning_span=None)
        unclosed.append(dataclasses.replace(episode, turns=(turn,)))
    counts = {}
    for reasoning in ("closed", "open"):
        config = DiagnosticsConfig(scopes=["first_turn"], num_pairs=6, reasoning=reasoning)
        out = run_diagnostics(policy, unclosed, config, DiagnosticsState(), generator=gen())
        counts[reasoning] = (out["diag/first_turn/pairs"], out["diag/first_turn/empty_reasoning"])
    assert counts == {"closed": (0.0, 6.0), "open": (6.0, 0.0)}


def test_the_permutation_null_is_logged_for_every_family_and_leaves_the_samplers_alone(policy, episodes):
    base = DiagnosticsConfig(scopes=["first_turn", "trajectory"], num_pairs=6)
    with_null = run_diagnostics(policy, episodes, base, DiagnosticsState(), generator=gen())
    off = DiagnosticsConfig(scopes=["first_turn", "trajectory"], num_pairs=6, null_draws=0)
    without = run_diagnostics(policy, episodes, off, DiagnosticsState(), generator=gen())
    null_keys = {k for k in with_null if k not in without}
    names = (
        *("mi_estimate_null_mean", "mi_estimate_null_std", "mi_contrast", "mi_contrast_ci_low", "mi_contrast_ci_high"),
        *("retrieval_above_chance_null_mean", "retrieval_above_chance_null_std", "retrieval_above_chance_corrected"),
        *("retrieval_above_chance_ci_low", "retrieval_above_chance_ci_high"),
    )
    assert null_keys == {f"diag/{scope}/est/{name}" for scope in ("first_turn", "trajectory") for name in names}
    # same pairs, same scores; the regime may differ: it reads the null-corrected retrieval when the null ran
    assert all(with_null[k] == without[k] for k in without if not k.endswith("/regime"))
    assert not unknown_keys(with_null)
    for scope in ("first_turn", "trajectory"):
        raw = with_null[f"diag/{scope}/est/mi_estimate"]
        corrected = with_null[f"diag/{scope}/est/mi_contrast"]
        assert corrected == pytest.approx(raw - with_null[f"diag/{scope}/est/mi_estimate_null_mean"], rel=1e-12)


def test_an_undefined_zscore_is_left_out_of_the_logged_keys():
    # every row scores [-1, -2] under the two columns: all marginals equal, marginal_std = 0 < std_eps
    per_token = torch.tensor([[-1.0, -2.0], [-1.0, -2.0]], dtype=torch.float64)
    scores = run._Scores(per_token * 3, per_token, torch.tensor([0, 1]), (0, 1))
    out = {}
    est = run._family(out, "trajectory", "", scores, DiagnosticsConfig(), DiagnosticsState())
    assert math.isnan(est["mi_zscore"]) and math.isnan(est["mi_zscore_ema"])  # the core says NaN
    for family in ("est", "seq"):
        assert f"diag/trajectory/{family}/mi_zscore" not in out  # the log leaves it out
        assert f"diag/trajectory/{family}/mi_zscore_ema" not in out
        assert out[f"diag/trajectory/{family}/marginal_std"] == 0.0 and f"diag/trajectory/{family}/mi_estimate" in out


def test_the_alarm_state_travels_with_the_checkpoint_and_older_states_still_load():
    state = DiagnosticsState()
    for share, low in ((0.2, 0.1), (0.5, 0.3), (0.6, 0.4), (0.7, 0.5)):
        state.alarm("trajectory").update(share, low, True)
    restored = DiagnosticsState()
    restored.load_state_dict(state.state_dict())
    assert restored.alarms == state.alarms and restored.alarm("trajectory").fired
    older = DiagnosticsState()
    older.load_state_dict({"decay": 0.9, "emas": {}})  # a checkpoint from before the alarm
    assert older.alarms == {}
