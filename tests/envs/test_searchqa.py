"""SearchQA: oracle over 500 seeds, hand-computed EM/F1 rewards, actions, splits, HotpotQA loaders, fuzz."""

from __future__ import annotations

import doctest
import json
import math
import pathlib
import sys
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirl.envs import check_env, commands, make, retrieval, searchqa
from mirl.envs.data import clear_caches, split_of
from mirl.envs.search.searchqa import answer_reward, normalize_answer, token_f1

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "hotpotqa_tiny.jsonl"


@pytest.fixture(scope="module")
def env():
    return make("searchqa")  # the default 20k-passage corpus, built once for the module


def test_oracle_finds_every_answer_over_500_seeds(env):
    hops_by_kind = {"single": set(), "bridge": set(), "comparison": set()}
    for seed in range(500):
        env.reset(seed=seed)
        question = env.instance
        hops_by_kind[question.kind].add(len(question.hops))
        for query, expected in question.hops:
            observation, reward, terminated, truncated, info = env.step(f"search[{query}]")
            assert info["action_valid"] and not terminated and reward == 0
            assert expected in observation, (seed, question, query)
        observation, reward, terminated, truncated, info = env.step(f"finish[{question.answer}]")
        assert (reward, terminated, info["success"], info["em"]) == (1.0, True, True, True)
    assert hops_by_kind == {"single": {1}, "bridge": {2}, "comparison": {2}}


def test_bridge_answer_is_not_in_the_first_hop(env):
    for seed in range(200):
        env.reset(seed=seed)
        if env.instance.kind == "bridge":
            first_query, middle = env.instance.hops[0]
            observation = env.step(f"search[{first_query}]")[0]
            assert middle in observation


@pytest.mark.parametrize(
    ("prediction", "gold", "reward"),
    [
        ("The Vantor Mills", "Vantor Mills", 1.0),  # article dropped
        ("vantor mills!", "Vantor Mills.", 1.0),  # case and punctuation
        ("an  Arvenia", "the Arvenia", 1.0),
        ("Vantor Mills Company", "Vantor Mills", 0.8),  # P = 2/3, R = 1: 2 * (2/3) / (5/3) = 0.8
        ("Kelbrin", "Kelbrin Vantor Mills Ltd", 0.4),  # P = 1, R = 1/4: 2 * 0.25 / 1.25 = 0.4
        ("Kelbrin", "Kelbrin Vantor Mills Ltd Co", 1 / 3),  # R = 1/5: 0.4 / 1.2 = 1/3 >= 0.3
        ("x b c", "x b c d e f g h i j k l m n o p q", 0.3),  # F1 = 2 * 3 / (3 + 17) = 0.3: at the threshold
        ("Kelbrin", "Kelbrin u v w y z", 0.0),  # R = 1/6: F1 = 2/7 < 0.3 -> 0
        ("the", "Arvenia", 0.0),  # nothing left after normalising
        ("1912", "1921", 0.0),
    ],
)
def test_reward_matches_hand_computed_cases(prediction, gold, reward):
    assert math.isclose(answer_reward(prediction, gold)[0], reward, rel_tol=1e-9, abs_tol=1e-12)


def test_normalisation_and_f1_pieces():
    assert normalize_answer("  The Lantern-Review,  a Magazine ") == "lanternreview magazine"
    assert token_f1("b c", "x b c d e f g h i j k l m n o p q") == pytest.approx(2 * 2 / 19, rel=1e-12)


def test_invalid_actions_change_nothing(env):
    observation, _ = env.reset(seed=1)
    for action in ("search[", "search[]", "finish[   ]", "click[x]", "lookup[a]", "just an answer", "", "search]x["):
        result = env.step(action)
        assert result[0] == observation and result[1] == 0.0 and not result[2] and not result[3]
        assert not result[4]["action_valid"] and env.steps == 0


def test_search_budget_truncates_and_later_steps_are_inert():
    env = make("searchqa", corpus_size=200, max_steps=2)
    env.reset(seed=0)
    assert env.step("search[anything]")[3] is False
    observation, reward, terminated, truncated, info = env.step("SEARCH[ something else ]")
    assert (terminated, truncated, info["action_valid"]) == (False, True, True)
    late = env.step("finish[x]")  # the episode is over: inert
    assert late[:4] == (observation, 0.0, False, True) and not late[4]["action_valid"]


def test_results_are_capped_per_passage():
    env = make("searchqa", corpus_size=200, top_k=5, max_chars=400)
    env.reset(seed=0)
    observation = env.step("search[born city organisation founded works]")[0]
    docs = [line for line in observation.splitlines() if line.startswith("Doc ")]
    assert len(docs) == 5 and all(len(line) <= 80 for line in docs)


def test_train_and_validation_questions_are_disjoint():
    train, validation = make("searchqa", corpus_size=500), make("searchqa", corpus_size=500, split="validation")
    train_texts = {train.reset(seed=s)[0] for s in range(150)}
    validation_texts = {validation.reset(seed=s)[0] for s in range(150)}
    assert not train_texts & validation_texts
    assert {split_of(validation.instance.text)} == {"validation"}


def test_same_options_same_corpus_and_other_seed_other_corpus():
    a, b = make("searchqa", corpus_size=300), make("searchqa", corpus_size=300, kb_seed=1)
    assert a.reset(seed=5) == make("searchqa", corpus_size=300).reset(seed=5)
    assert a.kb != b.kb


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_steps": 0}, "max_steps"),
        ({"top_k": 0}, "top_k"),
        ({"max_chars": 10}, "max_chars"),
        ({"corpus_size": 10}, "corpus_size"),
        ({"source": "web"}, "source"),
        ({"source": "local"}, "path="),
        ({"retriever_url": "localhost:8000"}, "http://"),
    ],
)
def test_bad_options_are_loud(options, message):
    with pytest.raises(ValueError, match=message):
        make("searchqa", **options)


def test_check_env_on_a_small_corpus_and_hotpot_rows():
    check_env(make("searchqa", corpus_size=300))
    check_env(make("searchqa", source="local", path=str(FIXTURE)))


def _rows():
    return [json.loads(line) for line in FIXTURE.read_text().splitlines()]


def test_local_hotpot_rows_search_their_own_paragraphs():
    clear_caches()
    env = make("searchqa", source="local", path=str(FIXTURE))
    by_question = {row["question"]: row for row in _rows()}
    for seed in range(len(by_question)):
        observation, _ = env.reset(seed=seed)
        row = by_question[env.question]
        for title in row["supporting_facts"]["title"]:
            assert f"(Title: {title})" in env.step(f"search[{title}]")[0]
        assert env.step(f"finish[{row['answer']}]")[1] == 1.0


def test_hub_loader_asks_for_the_distractor_config(monkeypatch):
    calls = []

    def load_dataset(path, name, split):
        calls.append((path, name, split))
        return _rows()

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    env = make("searchqa", source="hf", split="validation")
    env.reset(seed=2)
    assert calls == [("hotpotqa/hotpot_qa", "distractor", "validation")]
    assert env.question in {row["question"] for row in _rows()}


def test_a_corpus_file_replaces_the_question_paragraphs(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    lines = [{"id": "0", "contents": '"Caddock"\nCaddock lies on the River Ellan.'}, {"title": "X", "text": "y z"}]
    corpus.write_text("\n".join(json.dumps(line) for line in lines))
    env = make("searchqa", source="local", path=str(FIXTURE), corpus_path=str(corpus))
    env.reset(seed=0)
    assert "Doc 1 (Title: Caddock) Caddock lies on the River Ellan." in env.step("search[caddock river]")[0]


SPECIAL = st.sampled_from(["search[", "search[]", "finish[]", "search[" + "word " * 20_000 + "]", "finish[1990]"])
ACTIONS = st.one_of(
    st.text(max_size=40), SPECIAL, st.text(max_size=40).map(lambda t: f"search[{t}]"), st.just("search[" * 50)
)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), script=st.lists(ACTIONS, max_size=8))
def test_step_never_raises_on_odd_text(seed, script):
    env = make("searchqa", corpus_size=300)
    env.reset(seed=seed)
    for action in script:
        observation, reward, terminated, truncated, info = env.step(action)
        assert observation == env.render() and math.isfinite(reward) and 0.0 <= reward <= 1.0
        assert type(terminated) is bool and type(truncated) is bool and type(info["action_valid"]) is bool


@pytest.mark.parametrize("module", [searchqa, retrieval, commands])
def test_doctests(module):
    outcome = doctest.testmod(module)
    assert outcome.attempted > 0 and outcome.failed == 0
