"""KeySum: rewards by hand, the noise knob, the disjoint key splits, invalid answers, the reasoning labels."""

import numpy as np
import pytest

from mirl.envs import make
from mirl.envs.lab.keysum import (
    KeySumEnv,
    key_in_split,
    parse_observation,
    solution_reasoning,
    states_symbols,
    template_reasoning,
)


def play_correctly(env):
    rewards = []
    done = False
    while not done:
        _, reward, done, _, info = env.step(str(env.answer()))
        rewards.append(reward)
    return rewards, info


def test_correct_answers_earn_one_a_question_and_success():
    env = make("keysum")
    observation, info = env.reset(seed=4)
    key, letters = parse_observation(observation)
    assert env.answer() == sum(key[x] for x in letters) % 8 and not info["success"]
    rewards, info = play_correctly(env)
    assert rewards == [1.0, 1.0] and info["success"] and env.render() == "done"


def test_a_wrong_answer_earns_zero_and_no_success_and_an_invalid_one_keeps_the_question():
    env = make("keysum")
    first, _ = env.reset(seed=4)
    for bad in ("8", "12", "four", "", " "):
        observation, reward, done, _, info = env.step(bad)
        assert (observation, reward, done, info["action_valid"]) == (first, 0.0, False, False)
    wrong = str((env.answer() + 1) % 8)
    _, reward, _, _, info = env.step(f"  {wrong} ")
    assert reward == 0.0 and info["action_valid"]
    _, reward, done, _, info = env.step(str(env.answer()))
    assert reward == 1.0 and done and not info["success"]  # one of two right


def test_hard_share_sets_three_letters_and_noise_one_makes_reward_chance():
    hard = make("keysum", hard_share=1.0)
    assert all(len(parse_observation(hard.reset(seed=s)[0])[1]) == 3 for s in range(20))
    easy = make("keysum", hard_share=0.0)
    assert all(len(parse_observation(easy.reset(seed=s)[0])[1]) == 2 for s in range(20))
    noisy = make("keysum", noise=1.0)
    rewards = []
    for seed in range(400):
        noisy.reset(seed=seed)
        rewards += play_correctly(noisy)[0]
    # every answer replaced by a uniform symbol: 800 draws, mean 1/8, binomial SD sqrt(p(1-p)/800) = 0.0117
    assert abs(np.mean(rewards) - 0.125) < 4 * 0.0117


def test_train_and_validation_keys_are_disjoint_and_cover_every_key():
    keys = [tuple(int(d) for d in np.base_repr(k, 8).zfill(4)) for k in range(8**4)]
    validation = {k for k in keys if key_in_split(k, "validation", 0.2)}
    train = {k for k in keys if key_in_split(k, "train", 0.2)}
    assert not validation & train and len(validation | train) == 4096 and len(validation) == round(0.2 * 4096)
    for split, allowed in (("train", train), ("validation", validation)):
        env = make("keysum", split=split)
        for seed in range(50):
            key, _ = parse_observation(env.reset(seed=seed)[0])
            assert tuple(key[x] for x in "abcd") in allowed


def test_reasoning_labels_against_the_solver():
    env = make("keysum", hard_share=1.0)
    observation, _ = env.reset(seed=1)
    key, letters = parse_observation(observation)
    grounded = solution_reasoning(key, letters)
    assert KeySumEnv.reasoning_kind(observation, grounded) == "grounded"
    assert KeySumEnv.reasoning_kind(observation, template_reasoning(np.random.default_rng(0))) == "template"
    wrong = grounded.replace(f"{letters[0]} {key[letters[0]]}", f"{letters[0]} {(key[letters[0]] + 1) % 8}", 1)
    assert KeySumEnv.reasoning_kind(observation, wrong) == "other"
    assert KeySumEnv.reasoning_kind("done", grounded) is None
    assert states_symbols(observation, "") is False


@pytest.mark.parametrize(
    ("option", "value"), [("key_size", 1), ("questions", 0), ("hard_share", 1.5), ("noise", -0.1), ("split", "test")]
)
def test_bad_options_are_refused_with_the_fix(option, value):
    with pytest.raises(ValueError, match=option):
        make("keysum", **{option: value})


def test_a_split_without_keys_is_refused_before_any_reset():
    # 0.001 x 8**2 = 0.064 rounds to 0 validation keys: reset would draw forever
    with pytest.raises(ValueError, match="leaves 0 of 64 keys"):
        make("keysum", key_size=2, split="validation", validation_share=0.001)


def test_easy_letters_one_names_a_single_letter_whose_symbol_is_the_answer():
    env = make("keysum", easy_letters=1, hard_share=0.0)
    for seed in range(30):
        observation, _ = env.reset(seed=seed)
        key, letters = parse_observation(observation)
        assert len(letters) == 1 and env.answer() == key[letters]  # the answer stands in the observation
        assert KeySumEnv.reasoning_kind(observation, f"{letters} {key[letters]}") == "grounded"
        assert KeySumEnv.reasoning_kind(observation, "let me think") == "template"
    hard = make("keysum", easy_letters=1, hard_share=1.0)
    assert all(len(parse_observation(hard.reset(seed=s)[0])[1]) == 3 for s in range(20))


def test_easy_letters_keeps_the_draws_of_the_default_task():
    # same keys and hard/easy draws at every seed; a two-letter question's first letter is the one-letter question
    for seed in range(30):
        one, two = make("keysum", easy_letters=1, hard_share=0.3), make("keysum", hard_share=0.3)
        (a, _), (b, _) = one.reset(seed=seed), two.reset(seed=seed)
        key_a, letters_a = parse_observation(a)
        key_b, letters_b = parse_observation(b)
        assert key_a == key_b and one.hard == two.hard
        assert letters_a == letters_b if one.hard else letters_b.startswith(letters_a)


def test_easy_letters_is_deterministic_and_refuses_other_counts():
    first = [make("keysum", easy_letters=1).reset(seed=s)[0] for s in range(10)]
    assert first == [make("keysum", easy_letters=1).reset(seed=s)[0] for s in range(10)]
    for bad in (0, 3):
        with pytest.raises(ValueError, match="easy_letters must be 1 or 2"):
            make("keysum", easy_letters=bad)


def test_easy_letters_one_meets_the_env_contract():
    from mirl.envs import check_env
    from mirl.envs.checker import transcript

    for hard_share in (0.0, 0.5):
        check_env(make("keysum", easy_letters=1, hard_share=hard_share))
        check_env(make("keysum", easy_letters=1, hard_share=hard_share), seed=12345)
    for seed in (0, 1, 99):
        first, second = make("keysum", easy_letters=1), make("keysum", easy_letters=1)
        second.reset(seed=seed + 1)
        assert transcript(first, seed) == transcript(second, seed)


def test_easy_shown_writes_the_answer_of_an_easy_question_and_leaves_hard_ones_and_the_draws_alone():
    for seed in range(30):
        shown, plain = (
            make("keysum", easy_letters=1, easy_shown=True, hard_share=0.4),
            make("keysum", easy_letters=1, hard_share=0.4),
        )
        (a, _), (b, _) = shown.reset(seed=seed), plain.reset(seed=seed)
        assert parse_observation(a) == parse_observation(b)  # same key, same letters
        if shown.hard:
            assert a == b and "=" not in a
        else:
            assert a == f"{b} = {shown.answer()}"
            _, letters = parse_observation(a)
            assert KeySumEnv.reasoning_kind(a, f"{letters} {shown.answer()}") == "grounded"
            assert KeySumEnv.reasoning_kind(a, "let me think") == "template"
        # the second question is shown too
        shown.step(str(shown.answer()))
        second = shown.render()
        assert ("=" in second) == (not shown.hard) and second.endswith(str(shown.answer()) if not shown.hard else "")


def test_easy_shown_needs_one_letter_questions_and_meets_the_env_contract():
    from mirl.envs import check_env

    with pytest.raises(ValueError, match="easy_shown needs easy_letters=1"):
        make("keysum", easy_shown=True)
    for hard_share in (0.0, 0.5):
        check_env(make("keysum", easy_letters=1, easy_shown=True, hard_share=hard_share))
