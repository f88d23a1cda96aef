"""``mirl.Task``: the env it builds keeps the contract, seeds map to prompts, the split is disjoint, a failing
reward function is an error naming the prompt, and the trainer's config gets the task as its env."""

from __future__ import annotations

import pytest

from mirl.envs import check_env, make, registry
from mirl.envs.task import Conversation, Task, TaskError
from mirl.envs.task.examples import pick, split, text_rank
from mirl.trainer.specs import validation_seed

SUMS = [{"prompt": f"What is {a} + {b}?", "solution": str(a + b)} for a in range(5) for b in range(4)]  # 20


def exact(prompt: str, answer: str, solution: str) -> float:
    return 1.0 if answer.strip() == solution else 0.0


def guess(conversation: Conversation, answer: str):
    """Guess the example's number: "higher"/"lower" hints, reward 1 when right, -0.1 for a non-number."""
    target = conversation.example["target"]
    if not answer.strip().isdigit():
        return "Say a number.", -0.1, False
    if int(answer) == target:
        return "Right!", 1.0, True
    return ("Higher." if int(answer) < target else "Lower."), 0.0, False


GUESSES = [{"prompt": f"Guess my number from 1 to {n}.", "target": (n + 1) // 2} for n in range(2, 22)]


def test_single_turn_env_honours_the_contract():
    task = Task(SUMS, reward=exact, name="sums")
    for split_name in ("train", "validation"):
        check_env(task.make(split_name))
        check_env(task.make(split_name), seed=12345)


def test_multi_turn_env_honours_the_contract_with_and_without_action_words():
    check_env(Task(GUESSES, step=guess, name="guess", max_turns=4).make())
    words = Task(GUESSES, step=guess, name="guess_words", actions=("1", "2", "3"), max_turns=3)
    env = words.make()
    check_env(env)
    observation, _ = env.reset(seed=0)
    # an illegal word changes nothing and never reaches the step function
    assert env.step("seven") == (observation, 0.0, False, False, _illegal(False))


def _illegal(success: bool) -> dict:
    return {"success": success, "action_valid": False, "action_effective": False}


def test_reward_gets_the_example_fields_it_names_and_success_follows_the_threshold():
    task = Task(SUMS, reward=exact, validation=2)
    env = task.make()
    prompt, info = env.reset(seed=4)
    solution = task.train_examples[info["example_index"]]["solution"]
    assert prompt == task.train_examples[info["example_index"]]["prompt"]
    assert env.step(f" {solution} ") == ("Reward: 1.", 1.0, True, False, _legal(True))
    assert env.step(solution) == ("Reward: 1.", 0.0, True, False, _illegal(True))  # after the end: illegal
    env.reset(seed=4)
    assert env.step("nope")[1:] == (0.0, True, False, _legal(False))


def _legal(success: bool) -> dict:
    return {"action_valid": True, "action_effective": True, "success": success}


def test_multi_turn_conversation_accumulates_and_truncates_at_max_turns():
    seen = []

    def record(conversation: Conversation, answer: str):
        seen.append((conversation.turn, list(conversation.answers), conversation.observations[-1]))
        return f"echo {answer}", 0.25, False

    env = Task(["Talk to me.", "Say something."], step=record, validation=["Hello?"], max_turns=2).make()
    prompt, _ = env.reset(seed=0)
    assert env.step("a")[:4] == ("echo a", 0.25, False, False)
    assert env.step("b")[:4] == ("echo b", 0.25, False, True)  # 2 answers = max_turns: truncated
    assert seen == [(0, [], prompt), (1, ["a"], "echo a")]
    assert env.step("c")[4]["action_valid"] is False


def test_seeds_map_to_prompts_deterministically():
    task = Task([f"prompt {i}" for i in range(50)], reward=lambda prompt, answer: 0.0, validation=5)
    train, validation = task.make("train"), task.make("validation")
    firsts = [train.reset(seed=seed)[0] for seed in range(0, 1200, 2)]  # the trainer's train seeds are even
    assert firsts == [task.make("train").reset(seed=seed)[0] for seed in range(0, 1200, 2)]
    assert set(firsts) == {e["prompt"] for e in task.train_examples}  # even seeds still reach every prompt
    # validation instance j (seed 2j + 1) plays validation example j: each once for num_instances = 5
    shown = [validation.reset(seed=validation_seed(j))[0] for j in range(5)]
    assert shown == [e["prompt"] for e in task.validation_examples]
    assert [pick(validation_seed(j), 5, "validation") for j in range(7)] == [0, 1, 2, 3, 4, 0, 1]


def test_split_is_disjoint_by_prompt_text_and_independent_of_order():
    texts = [f"q{i % 30}" for i in range(45)]  # 30 distinct texts, 15 of them twice
    task = Task(texts, reward=lambda prompt, answer: 0.0, validation=0.2)  # ceil(0.2 * 45) = 9 at least
    held = {e["prompt"] for e in task.validation_examples}
    assert held.isdisjoint(e["prompt"] for e in task.train_examples)
    assert 9 <= len(task.validation_examples) <= 10  # whole texts: the last one may bring its copy
    assert held == set(sorted(set(texts), key=text_rank)[: len(held)])  # the lowest hashes
    reordered = Task(list(reversed(texts)), reward=lambda prompt, answer: 0.0, validation=0.2)
    assert {e["prompt"] for e in reordered.validation_examples} == held
    assert split(("a", "b"), 1)[1] != ()


def test_explicit_validation_examples_must_not_repeat_a_training_prompt():
    task = Task(["a", "b"], reward=lambda prompt, answer: 0.0, validation=["c"])
    assert [e["prompt"] for e in task.validation_examples] == ["c"]
    with pytest.raises(ValueError, match=r"validation\[0\] 'b' is also a training prompt"):
        Task(["a", "b"], reward=lambda prompt, answer: 0.0, validation=["b"])


def test_a_failing_reward_function_raises_naming_the_prompt_and_answer():
    def broken(prompt, answer):
        return 1.0 / int(answer == "never")

    env = Task(["What is 1 + 1?", "What is 2 + 2?", "What is 3 + 3?"], reward=broken, validation=["x"]).make()
    prompt, _ = env.reset(seed=0)
    with pytest.raises(TaskError, match=r"reward function raised ZeroDivisionError.*'What is \d \+ \d\?'.*'2'") as err:
        env.step("2")
    assert isinstance(err.value.__cause__, ZeroDivisionError)  # the user's traceback is kept


@pytest.mark.parametrize(
    ("value", "expected"),
    [(float("nan"), "nan"), ("1", "str"), (None, "None")],
)
def test_a_reward_that_is_not_a_finite_number_is_an_error(value, expected):
    env = Task(["a", "b"], reward=lambda prompt, answer: value, validation=1).make()
    env.reset(seed=0)
    with pytest.raises(TaskError, match=f"returned .*{expected}.* return a finite float"):
        env.step("x")


def test_a_malformed_step_result_is_an_error():
    env = Task(["a", "b"], step=lambda conversation, answer: ("text", 1.0), validation=1).make()
    env.reset(seed=0)
    with pytest.raises(TaskError, match=r"return \(observation, reward, done\)"):
        env.step("x")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of reward"),
        ({"reward": exact, "step": guess}, "exactly one of reward"),
        ({"reward": exact, "name": "my task"}, "name must be letters"),
        ({"reward": exact, "max_turns": 3}, "belong to multi-turn tasks"),
        ({"reward": lambda prompt: 0.0}, r"must take \(prompt, answer"),
        ({"reward": lambda prompt, answer, hint: 0.0}, r"takes hint, which prompts\[0\]"),
        ({"step": guess, "actions": ("Up", "up")}, "distinct non-empty words"),
        ({"reward": exact, "validation": 1.5}, r"share must be in \(0, 1\)"),
        ({"reward": exact, "validation": 20}, "leaves no training prompt"),
    ],
)
def test_bad_settings_are_refused_with_the_fix(kwargs, message):
    with pytest.raises((TypeError, ValueError), match=message):
        Task(SUMS, **kwargs)


def test_a_missing_field_names_the_index_in_the_list_the_user_passed():
    """Example 3 of the user's list lacks ``target``: the error says prompts[3], whichever split it fell into (the
    split ranks prompts by hash, so a training-split index would point at another example); an explicit validation
    list is named as validation[i]."""
    examples = [{"prompt": f"p{i}", "target": str(i)} for i in range(3)] + [{"prompt": "p3"}]
    examples += [{"prompt": f"p{i}", "target": str(i)} for i in range(4, 8)]

    def reward(prompt, answer, target):
        return float(answer == target)

    with pytest.raises(ValueError, match=r"takes target, which prompts\[3\] 'p3' lacks"):
        Task(examples, reward=reward, validation=0.5)
    held = [{"prompt": "v0", "target": "0"}, {"prompt": "v1"}]
    with pytest.raises(ValueError, match=r"takes target, which validation\[1\] 'v1' lacks"):
        Task(examples[:3], reward=reward, validation=held)


@pytest.mark.parametrize(
    ("prompts", "message"),
    [("just one prompt", "wrap"), ([], "is empty"), ([{"question": "q"}], "prompt_key"), ([3], "is a int")],
)
def test_bad_prompts_are_refused_with_the_fix(prompts, message):
    with pytest.raises((TypeError, ValueError), match=message):
        Task(prompts, reward=exact)


def test_examples_come_from_any_iterable_and_a_custom_prompt_key():
    rows = ({"question": f"q{i}", "answer": str(i)} for i in range(10))  # a generator, as a dataset streams
    task = Task(
        rows, reward=lambda q, completion, **fields: float(completion == fields["answer"]), prompt_key="question"
    )
    env = task.make()
    prompt, info = env.reset(seed=2)
    assert prompt == task.train_examples[info["example_index"]]["question"]
    assert env.step(prompt[1:])[1] == 1.0  # **fields received every other field
    with pytest.raises(ValueError, match="'answer' has the name of the reward function's parameter for the answer"):
        Task([{"prompt": "q", "answer": "1"}], reward=lambda prompt, answer, **fields: 0.0, validation=["p"])


def test_registration_lasts_for_the_with_block_only_and_the_trainer_config_uses_it():
    from mirl.trainer.specs import train_specs, validation_specs
    from mirl.trainer.tasks import task_config

    task = Task(SUMS, reward=exact, name="sums_cfg", validation=3)
    assert "sums_cfg" not in registry
    with task.registered():
        config = task_config([task, "frozenlake"], overrides=["rollout.prompts_per_iteration=4"])
        assert [e.name for e in config.envs] == ["sums_cfg", "frozenlake"]
        assert config.validation.num_instances == 3
        specs = train_specs(config, iteration=1)
        assert {s.env: s.options for s in specs}["sums_cfg"] == {"split": "train"}
        assert {s.env: s.options for s in validation_specs(config)}["sums_cfg"] == {"split": "validation"}
        assert make("sums_cfg", split="validation").reset(seed=1)[0] == task.validation_examples[0]["prompt"]
    assert "sums_cfg" not in registry


def test_a_task_name_is_refused_when_a_builtin_env_or_a_registered_task_has_it():
    with pytest.raises(ValueError, match="'sokoban' is a built-in env's"):
        Task(SUMS, reward=exact, name="sokoban")
    first, second = Task(SUMS, reward=exact, name="twin"), Task(SUMS, reward=exact, name="twin")
    with first.registered(), pytest.raises(ValueError, match="already registered"), second.registered():
        pass
    assert "twin" not in registry
