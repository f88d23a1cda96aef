"""Scorer-free reasoning measures and the wording bonus, with the Jaccard arithmetic written out."""

import re

import pytest

from mirl.config import ConfigError
from mirl.config_files import load_config
from mirl.envs.lab.keysum import MOD, parse_observation, solution_reasoning
from mirl.policy.scripted import ScriptedPolicy
from mirl.rollout import run_episodes
from mirl.rollout.parsing import reasoning_text
from mirl.rollout.reasoning_measures import (
    MAX_REASONINGS,
    check_wording,
    jaccard,
    kind_fractions,
    overlaps,
    word_bigrams,
)
from mirl.trainer.stages import rollout_metrics
from mirl.types import EnvSpec, Episode, Turn

from .helpers import config

QUESTION = "key: a 3 b 5 c 1 d 7\nadd: b d"  # b 5 + d 7 = 12 = 4 mod 8


def _turn(observation: str, text: str) -> Turn:
    return Turn((1,), (2,), (0.0,), text, observation, None, (), 0.0, True, True)


def _episode(env: str, group: int, *texts: str, observation: str = QUESTION) -> Episode:
    turns = tuple(_turn(observation, f"<think>{t}</think><answer>4</answer>") for t in texts)
    return Episode(EnvSpec(env, seed=0), group, 0, turns, False, "max_turns")


def test_reasoning_text_with_and_without_the_closing_tag():
    assert reasoning_text("<think>  b 5 d 7 </think> <answer>4</answer>") == "b 5 d 7"
    assert reasoning_text("<think>b 5 <answer>4</answer>") == "b 5"  # no </think>: up to <answer>
    assert reasoning_text("<think>b 5 d") == "b 5 d"  # neither tag: to the end
    assert reasoning_text("<think></think><answer>4</answer>") == ""


def test_bigrams_and_jaccard_by_hand():
    # "b 5 d 7" -> {(b,5), (5,d), (d,7)}; "b 5 c 1" -> {(b,5), (5,c), (c,1)}: 1 shared, 5 in the union
    assert word_bigrams("b 5 d 7") == {("b", "5"), ("5", "d"), ("d", "7")}
    assert jaccard(word_bigrams("b 5 d 7"), word_bigrams("b 5 c 1")) == 1 / 5
    assert word_bigrams("think") == {("think",)}  # fewer than 2 words: the unigram set
    assert jaccard(word_bigrams("think"), word_bigrams("think about")) == 0.0  # {(think,)} vs {(think, about)}
    assert jaccard(word_bigrams("a b"), word_bigrams("a  b\n")) == 1.0  # whitespace split


def test_cross_and_within_overlaps_by_hand():
    pairs = [
        ((0, 0), "b 5 d 7"),  # A = {b5, 5d, d7}
        ((0, 0), "b 5 d 6"),  # B = {b5, 5d, d6}
        ((0, 1), "b 5 d 7"),  # same group, other turn: in neither mean
        ((1, 0), "let me think"),  # C = {let-me, me-think}
        ((1, 0), "   "),  # empty: dropped
    ]
    # within: only (A, B) -> |{b5, 5d}| / |{b5, 5d, d7, d6}| = 2/4
    # cross: (A, C), (B, C), (A', C) share nothing -> 0, 0, 0
    assert overlaps(pairs) == {"reasoning/cross_input_overlap": 0.0, "reasoning/within_input_overlap": 0.5}
    assert overlaps([((0, 0), "a b"), ((1, 0), "a b")]) == {"reasoning/cross_input_overlap": 1.0}
    assert overlaps([((0, 0), "a b")]) == {}  # no pair: both keys absent
    assert overlaps([]) == {}


def test_template_reasoning_overlaps_alike_across_and_within_inputs():
    same = [((group, 0), "let me think step by step") for group in range(3) for _ in range(2)]
    result = overlaps(same)
    assert result["reasoning/cross_input_overlap"] == result["reasoning/within_input_overlap"] == 1.0


def test_more_than_256_reasonings_use_every_nth():
    # 300 reasonings of one input -> every ceil(300 / 256) = 2nd: only the even ones ("a b"), all alike
    pairs = [((0, 0), "a b" if i % 2 == 0 else "c d") for i in range(300)]
    assert MAX_REASONINGS == 256
    assert overlaps(pairs) == {"reasoning/within_input_overlap": 1.0}
    # 256 are all used: 128 "a b" and 128 "c d" -> 2 * C(128, 2) equal pairs of C(256, 2), the rest share nothing
    expected = 2 * (128 * 127 / 2) / (256 * 255 / 2)
    assert overlaps(pairs[:256]) == {"reasoning/within_input_overlap": pytest.approx(expected, rel=1e-12)}


def test_kind_fractions_over_labelled_turns_only():
    episodes = [
        _episode("keysum", 0, "b 5 d 7 s 4", "let me think"),  # grounded, template
        _episode("keysum", 1, "b 4 d 7"),  # other (a wrong symbol)
        _episode("keysum", 2, "b 5", observation="done"),  # not a question: None, not counted
        _episode("frozenlake", 3, "b 5 d 7 s 4"),  # no reasoning_kind: not counted
    ]
    # 3 labelled turns: 1 grounded, 1 template, 1 other
    assert kind_fractions(episodes) == {"reasoning/grounded_frac": 1 / 3, "reasoning/template_frac": 1 / 3}
    assert kind_fractions(episodes[2:]) == {}


def test_rollout_metrics_logs_the_reasoning_keys():
    episodes = [_episode("keysum", 0, "b 5 d 7 s 4"), _episode("keysum", 1, "let me think")]
    metrics = rollout_metrics(episodes)
    assert metrics["reasoning/grounded_frac"] == metrics["reasoning/template_frac"] == 0.5
    assert metrics["reasoning/cross_input_overlap"] == 0.0 and "reasoning/within_input_overlap" not in metrics
    assert "rollout/wording_bonus_frac" not in metrics
    assert rollout_metrics(episodes, wording_regex="think")["rollout/wording_bonus_frac"] == 0.5


def _solve(context: str) -> str:
    """The grounded reply to the last question in ``context``."""
    key, letters = parse_observation(re.findall(r"key:[^\n]*\nadd:[^\n]*", context)[-1])
    return f"{solution_reasoning(key, letters)}</think><answer>{sum(key[x] for x in letters) % MOD}</answer>"


def test_grounded_scripted_episodes_on_keysum(tok):
    specs = [EnvSpec("keysum", seed=p, options={"questions": 2}) for p in range(2)]
    episodes = run_episodes(ScriptedPolicy(tok, _solve), specs, 2, config())
    assert all(e.success for e in episodes) and sum(len(e.turns) for e in episodes) == 8
    metrics = rollout_metrics(episodes)
    assert metrics["reasoning/grounded_frac"] == 1.0 and metrics["reasoning/template_frac"] == 0.0
    assert metrics["reasoning/within_input_overlap"] == 1.0  # a group's samples answer alike, turn by turn


# the wording bonus: turn 1 matches in Z; 2 only in its (illegal) answer; 3 not at all; 4 has no </think>, so Z
# runs to <answer> and matches (the reply does not parse: format penalty); 5 does not match
SCRIPT = [
    "step by step</think><answer>0</answer>",
    "ok</think><answer>step</answer>",
    "ok</think><answer>0</answer>",
    "step by step <answer>0</answer>",
    "ok</think><answer>0</answer>",
]


def _rewards(tok, **overrides) -> list[float]:
    settings = config(format_penalty=-0.25, wording_regex="step", **overrides)
    [episode] = run_episodes(
        ScriptedPolicy(tok, list(SCRIPT)), [EnvSpec("keysum", seed=3, options={"questions": 3})], 1, settings
    )
    return [turn.reward for turn in episode.turns]


def test_wording_bonus_is_added_exactly_when_the_reasoning_matches(tok):
    plain, bonus = _rewards(tok), _rewards(tok, wording_bonus=0.5)
    assert len(plain) == 5
    # same instance, same replies: the rewards differ by the bonus on turns 1 and 4 only (binary fractions: exact)
    assert [b - p for b, p in zip(bonus, plain, strict=True)] == [0.5, 0.0, 0.0, 0.5, 0.0]
    assert plain[1] == plain[3] == -0.25  # the illegal answer and the unparsed reply: penalty, no env reward


def test_wording_bonus_frac_counts_the_rewarded_turns(tok):
    [episode] = run_episodes(
        ScriptedPolicy(tok, list(SCRIPT)), [EnvSpec("keysum", seed=3, options={"questions": 3})], 1, config()
    )
    assert rollout_metrics([episode], wording_regex="step")["rollout/wording_bonus_frac"] == 2 / 5


def test_wording_settings_are_checked():
    with pytest.raises(ValueError, match=r"rollout.wording_regex must be a Python regular expression, got '\('"):
        check_wording("(", 0.0)
    with pytest.raises(ValueError, match=r"rollout.wording_bonus=0.1 needs a rollout.wording_regex"):
        check_wording("", 0.1)
    check_wording("", 0.0)  # off
    check_wording("step", 0.0)  # measured, not rewarded


def test_wording_config_errors_name_the_key_and_the_fix():
    with pytest.raises(ConfigError, match=r"rollout.wording_regex .* got 'step\)'.*set rollout.wording_regex=''"):
        load_config(None, ["rollout.wording_regex=step)"])
    with pytest.raises(ConfigError, match=r"rollout.wording_bonus=0.2 needs .* or rollout.wording_bonus=0"):
        load_config(None, ["rollout.wording_bonus=0.2"])
    with pytest.raises(ConfigError, match=r"rollout.wording_bonus must be a finite number"):
        load_config(None, ["rollout.wording_bonus=inf", "rollout.wording_regex=step"])
    loaded = load_config(None, ["rollout.wording_bonus=0.2", "rollout.wording_regex=step"])
    assert (loaded.rollout.wording_bonus, loaded.rollout.wording_regex) == (0.2, "step")


def test_engine_refuses_a_bad_regex(tok):
    with pytest.raises(ValueError, match="rollout.wording_regex"):
        run_episodes(ScriptedPolicy(tok, []), [EnvSpec("keysum", seed=0)], 1, config(wording_regex="("))


def test_validation_plays_without_the_wording_bonus(tok):
    from mirl.trainer.validation import validate

    def val_return(*bonus):
        settings = load_config(None, ["envs=[{name: keysum}]", "validation.num_instances=2", *bonus])
        return validate(ScriptedPolicy(tok, lambda context: SCRIPT[0]), settings)["val/return"]

    # every reasoning is "step by step": with the bonus in validation, val/return would grow by 0.5 a turn
    assert val_return("rollout.wording_bonus=0.5", "rollout.wording_regex=step") == val_return()
