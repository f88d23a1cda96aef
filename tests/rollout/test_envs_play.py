"""Every registered env plays full episodes through the engine with scripted replies.

The hand-written transcripts pin the instance of seed 0 (its first observation is asserted first, so a change
in an env's generator shows up as such, not as a rollout bug).
"""

import pytest

from mirl.envs import registry
from mirl.policy.scripted import ScriptedPolicy
from mirl.rollout import run_episodes
from mirl.types import EnvSpec

from .helpers import config, reply

ENVS = sorted(name for name in registry if name != "openenv")  # openenv needs a server: tests/remote


def play(tok, env, answers, options=None, **overrides):
    policy = ScriptedPolicy(tok, [reply(answer) for answer in answers])
    [episode] = run_episodes(policy, [EnvSpec(env, 0, options or {})], 1, config(**overrides))
    return episode


@pytest.mark.parametrize("env", ENVS)
def test_every_env_survives_unparsable_replies(tok, env):
    policy = ScriptedPolicy(tok, lambda context: "I will not use the format")
    episodes = run_episodes(policy, [EnvSpec(env, 0), EnvSpec(env, 1)], 2, config(max_turns=3))
    multi_turn = registry[env].multi_turn
    for ep in episodes:
        assert ep.num_turns == (3 if multi_turn else 1)
        assert ep.end_reason == "max_turns" and not ep.success
        assert all(not turn.format_valid and turn.reward == -0.1 for turn in ep.turns)
        assert ep.total_reward == pytest.approx(-0.1 * ep.num_turns, abs=1e-12)
        assert len({turn.observation for turn in ep.turns}) == 1  # nothing executed, state unchanged


@pytest.mark.parametrize("env", ENVS)
def test_group_members_face_the_same_first_state(tok, env):
    policy = ScriptedPolicy(tok, lambda context: reply("x"))
    episodes = run_episodes(policy, [EnvSpec(env, 3)], 3, config(max_turns=1))
    assert len({ep.turns[0].observation for ep in episodes}) == 1
    assert len({ep.turns[0].context_ids for ep in episodes}) == 1


def test_frozenlake_two_turns_to_the_goal(tok):
    ep = play(tok, "frozenlake", ["Down", "up || right"], {"success_rate": 1.0})
    assert ep.turns[0].observation == "____\nPG__\n_O__\n____"
    assert ep.turns[1].observation == "____\n_G__\nPO__\n____"
    assert [turn.actions for turn in ep.turns] == [("Down",), ("Up", "Right")]
    assert [turn.reward for turn in ep.turns] == [0.0, 1.0]  # binary reward at the goal
    assert ep.success and ep.end_reason == "success"


def test_frozenlake_hole_terminates_without_success(tok):
    ep = play(tok, "frozenlake", ["Down || Right"], {"success_rate": 1.0})  # (1,0) -> (2,0) -> hole (2,1)
    assert ep.end_reason == "terminated" and not ep.success and ep.total_reward == 0.0


def test_sokoban_one_push_solves_it(tok):
    ep = play(tok, "sokoban", ["left"])
    assert ep.turns[0].observation == "######\n##_#_#\n##OXP#\n##_#_#\n##_#_#\n######"
    assert ep.turns[0].reward == pytest.approx(10.9, abs=1e-9)  # -0.1 step + 1 box on target + 10 solved
    assert ep.success and ep.end_reason == "success" and ep.num_turns == 1


def test_sokoban_budget_runs_out(tok):
    # Up is a wall above the player: valid but ineffective, each spends budget and costs -0.1
    ep = play(tok, "sokoban", ["Up || Up"] * 3, action_budget=5, max_turns=5)
    assert ep.end_reason == "action_budget" and ep.num_turns == 3
    assert ep.total_reward == pytest.approx(-0.5, abs=1e-9)  # 2 + 2 + 1 steps at -0.1


def test_bandit_single_pull(tok):
    ep = play(tok, "bandit", ["bond"])
    assert ep.turns[0].observation.startswith("There are two arms: Venture and Bond.")
    assert ep.turns[0].actions == ("Bond",) and ep.turns[0].reward == pytest.approx(0.1, abs=1e-12)
    assert ep.end_reason == "terminated" and not ep.success  # the risky arm has the higher mean, 0.25


@pytest.mark.parametrize(
    ("answer", "reward", "end_reason"),
    [
        ("51 + 27 - 64 + 31", 1.0, "success"),  # 78 - 64 + 31 = 45
        ("64 + 51 + 27 + 31", 0.1, "terminated"),  # right numbers, 173 != 45
        ("64 +", -0.1, "terminated"),  # env rejects the expression: format penalty, reward 0
    ],
)
def test_countdown_one_answer(tok, answer, reward, end_reason):
    ep = play(tok, "countdown", [answer])
    assert ep.turns[0].observation == "Numbers: [64, 51, 27, 31]\nTarget: 45"
    assert ep.turns[0].reward == pytest.approx(reward, abs=1e-12) and ep.end_reason == end_reason


def test_metamath_retry_earns_half(tok):
    ep = play(tok, "metamath", ["14", "15"])  # 10 * 17 - 155 = 15
    assert ep.turns[0].observation.startswith("Chloe buys 10 boxes of pencils")
    assert ep.turns[1].observation == "Incorrect. Please think again."
    assert [turn.reward for turn in ep.turns] == [0.0, 0.5]  # 1 / 2**1 after one wrong answer
    assert ep.success and ep.end_reason == "success"


BALANCED = """```python
pairs, stack = {")": "(", "]": "[", "}": "{"}, []
for c in input().strip():
    if c not in pairs:
        stack.append(c)
    elif not stack or stack.pop() != pairs[c]:
        stack.append("!")
        break
print("NO" if stack else "YES")
```"""


@pytest.mark.parametrize(
    ("answer", "reward", "end_reason"),
    [
        (BALANCED, 1.0, "success"),
        ('```python\nprint("YES")\n```', 5 / 6, "terminated"),  # 5 of the 6 hidden tests expect YES
        ('print("YES")', -0.1, "terminated"),  # no fenced block: illegal, format penalty
    ],
)
def test_deepcoder_one_program(tok, answer, reward, end_reason):
    ep = play(tok, "deepcoder", [answer], max_new_tokens=512)
    assert ep.turns[0].observation.startswith("Write a Python program that reads the input from standard input")
    assert ep.turns[0].reward == pytest.approx(reward, abs=1e-12) and ep.end_reason == end_reason


def test_searchqa_comparison_in_two_searches(tok):
    # seed 0: "Which organisation was founded earlier, Haltes Foods or Wenmek Works?" (2023 vs 1984)
    answers = ["search[Haltes Foods]", "search[Wenmek Works]", "finish[the Wenmek Works]"]
    ep = play(tok, "searchqa", answers, max_new_tokens=128)
    assert ep.turns[0].observation == "Question: Which organisation was founded earlier, Haltes Foods or Wenmek Works?"
    assert "2023" in ep.turns[1].observation and "1984" in ep.turns[2].observation
    assert [turn.reward for turn in ep.turns] == [0.0, 0.0, 1.0]  # exact match once the article is dropped
    assert ep.success and ep.end_reason == "success"


def test_webshop_search_page_open_choose_and_buy(tok):
    # seed 0: a moisturizer for sensitive skin, fragrance free, coconut, travel size, under 60 dollars; the
    # product B0UHUBG6Y4 is listed 29th for the instruction's words, so two "next >" clicks reach its page
    answers = ["search[moisturizer sensitive skin fragrance free coconut travel size]", "click[next >]"]
    answers += ["click[Next >]", "click[b0uhubg6y4]", "click[coconut]", "click[travel size]", "click[buy now]"]
    ep = play(tok, "webshop", answers, max_turns=9, max_new_tokens=128)
    assert ep.turns[0].observation.startswith("Instruction: i need a moisturizer that is for sensitive skin")
    assert "Selected: scent: coconut, size: travel size" in ep.turns[-1].observation
    assert [turn.reward for turn in ep.turns] == [0.0] * 6 + [1.0]  # (2 attributes + 2 options + price) / 5
    assert ep.success and ep.end_reason == "success" and ep.num_turns == 7
