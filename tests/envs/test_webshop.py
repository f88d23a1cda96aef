"""WebShop: oracle over 500 seeds, hand-computed partial scores, pages and invalid clicks, real-schema files, fuzz."""

from __future__ import annotations

import doctest
import itertools
import json
import math
import pathlib
import shutil
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rapidfuzz import fuzz

from mirl.envs import catalogue, check_env, make, shop_reward, webshop_data
from mirl.envs.data import split_of
from mirl.envs.shop.catalogue import CATEGORIES, Goal, Product, generate_catalogue, goal_instruction
from mirl.envs.shop.data import load_webshop, parse_price
from mirl.envs.shop.reward import score, type_reward
from mirl.envs.shop.webshop import goal_key

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "webshop"


@pytest.fixture(scope="module")
def env():
    return make("webshop")  # the default 2000-product catalogue, indexed once for the module


def open_target(env, seed):
    """Search for the goal's words and page on until the goal product is listed, then open it."""
    env.reset(seed=seed)
    observation = env.step(f"search[{env.goal.instruction}]")[0]
    while f"[{env.goal.asin}]" not in observation:
        observation, _, _, _, info = env.step("click[next >]")
        assert info["action_valid"], observation
    return env.step(f"click[{env.goal.asin}]")[0]


def test_oracle_reaches_raw_score_one_over_500_seeds(env):
    for seed in range(500):
        open_target(env, seed)
        for value in env.goal.options:
            assert env.step(f"click[{value}]")[4]["action_valid"], (seed, value)
        observation, reward, terminated, truncated, info = env.step("click[buy now]")
        assert (reward, terminated, truncated, info["success"], info["raw_score"]) == (1.0, True, False, True, 1.0)
        assert env.steps <= env.max_steps and "Score: 1.000" in observation


# A hand-made goal: a dress with 2 attributes and 2 options under 40 dollars, so the denominator is 2 + 2 + 1 = 5.
DRESS = Product(
    "B0DRESS001", "Lorken Dress", "clothing", "Clothing, Shoes & Jewelry › Clothing › Dress", "dress", 31.5,
    ("machine washable", "short sleeve", "elastic waist"), (("color", ("blue", "red")), ("size", ("small", "medium"))),
    "The Lorken classic dress is machine washable, short sleeve and elastic waist.", ("Machine washable dress",), (),
)  # fmt: skip
GOAL = Goal(
    "B0DRESS001", "Lorken Dress", "dress", "Clothing, Shoes & Jewelry › Clothing › Dress",
    ("machine washable", "short sleeve"), ("blue", "medium"), 40.0, "i need a dress ...",
)  # fmt: skip


def _with(product: Product, **changes) -> Product:
    return Product(**{**product.__dict__, **changes})


@pytest.mark.parametrize(
    ("product", "chosen", "raw", "parts"),
    [
        (DRESS, ("blue", "medium"), 1.0, (1.0, 2, 2, True)),  # (2 + 2 + 1) / 5
        (DRESS, ("red", "medium"), 0.8, (1.0, 2, 1, True)),  # wrong colour: (2 + 1 + 1) / 5
        (DRESS, ("medium",), 0.8, (1.0, 2, 1, True)),  # colour never chosen: the same
        (_with(DRESS, price=45.0), ("blue", "medium"), 0.8, (1.0, 2, 2, False)),  # over the cap: (2 + 2 + 0) / 5
        # wrong type: the hoodie's title shares no word with "Lorken Dress", so r_type = 0 and the score is 0
        (_with(DRESS, title="Vamo Hoodie", query="hoodie"), ("blue", "medium"), 0.0, (0.0, 2, 2, True)),
        # the same brand: title score 1/2 > 0.2 keeps r_type = 1, but "short sleeve" is nowhere: (1 + 2 + 1) / 5
        (
            _with(
                DRESS,
                title="Lorken Hoodie",
                query="hoodie",
                attributes=("machine washable",),
                description="",
                features=(),
            ),
            ("blue", "medium"),
            0.8,
            (1.0, 1, 2, True),
        ),  # fmt: skip
        (_with(DRESS, price=45.0), ("red", "small"), 0.4, (1.0, 2, 0, False)),  # (2 + 0 + 0) / 5
    ],
)
def test_partial_scores_match_hand_computed_values(product, chosen, raw, parts):
    result = score(product, chosen, GOAL)
    assert math.isclose(result.raw, raw, rel_tol=1e-12, abs_tol=1e-12)
    assert (result.r_type, result.attributes_matched, result.options_matched, result.price_ok) == parts
    assert (result.attributes_total, result.options_total) == (2, 2)


def test_attribute_found_only_in_the_description_counts():
    quiet = _with(DRESS, attributes=(), features=(), description="A short sleeve dress.")
    assert score(quiet, ("blue", "medium"), GOAL).attributes_matched == 1  # "short sleeve" verbatim; "machine
    # washable" nowhere: (1 + 2 + 1) / 5 = 0.8
    assert math.isclose(score(quiet, ("blue", "medium"), GOAL).raw, 0.8, rel_tol=1e-12)


@pytest.mark.parametrize(
    ("title", "query", "category", "expected"),
    [
        # goal words: lunvale women s summer dress short sleeve floral knee (9; "women's" gives "women" and "s")
        ("Lunvale Summer Dress", "hoodie", "Home › Decor", 1.0),  # title score 3/9 > 0.2
        ("Kettle Summer", "kettle", "Home › Kitchen", 0.5),  # 1/9 = 0.111: in [0.1, 0.2], no query/category match
        ("Kettle Summer", "kettle", "Clothing › Women › Kitchen", 1.0),  # two shared category parts
        ("Kettle Summer", "women's dresses", "Home › Kitchen", 1.0),  # the same query
        ("Kettle Pot", "women's dresses", "Clothing › Women", 0.0),  # nothing shared in the title: 0 regardless
    ],
)
def test_type_reward_thresholds(title, query, category, expected):
    goal = Goal("X", "Lunvale Women's Summer Dress Short Sleeve Floral Knee", "women's dresses",
                "Clothing › Women › Dresses", (), (), 10.0, "")  # fmt: skip
    bought = Product("Y", title, "c", category, query, 1.0, (), (), "", (), ())
    assert type_reward(bought, goal) == expected


def test_type_reward_below_a_tenth_is_a_tenth():
    goal = Goal("X", " ".join(f"word{i}" for i in range(11)), "q", "A", (), (), 10.0, "")
    bought = Product("Y", "word3 other", "c", "B", "r", 1.0, (), (), "", (), ())  # 1/11 < 0.1
    assert type_reward(bought, goal) == 0.1


def _colour_seed(env):
    for seed in range(100):
        env.reset(seed=seed)
        if dict(env.products[env._by_asin[env.goal.asin]].options).get("color"):
            return seed
    raise AssertionError("no goal with a colour in 100 seeds")


def test_wrong_colour_through_the_env(env):
    seed = _colour_seed(env)
    open_target(env, seed)
    goal, product = env.goal, env.products[env._by_asin[env.goal.asin]]
    wanted = dict(zip((name for name, _ in product.options), goal.options, strict=True))
    wrong = next(value for value in dict(product.options)["color"] if value != wanted["color"])
    for name, value in wanted.items():
        env.step(f"click[{wrong if name == 'color' else value}]")
    info = env.step("click[buy now]")[4]
    total = len(goal.attributes) + len(goal.options) + 1  # every attribute and the price match, one option does not
    assert math.isclose(info["raw_score"], (total - 1) / total, rel_tol=1e-12) and not info["success"]
    assert (info["options_matched"], info["options_total"]) == (len(goal.options) - 1, len(goal.options))


def test_binary_reward_is_one_only_for_a_perfect_buy():
    env = make("webshop", reward="binary")
    seed = _colour_seed(env)
    open_target(env, seed)
    product = env.products[env._by_asin[env.goal.asin]]
    wrong = next(v for v in dict(product.options)["color"] if v not in env.goal.options)
    env.step(f"click[{wrong}]")
    _, reward, terminated, _, info = env.step("click[buy now]")
    assert reward == 0.0 and terminated and 0.0 < info["raw_score"] < 1.0


def _assert_invalid(env, actions):
    observation, steps, page = env.render(), env.steps, env.page
    for action in actions:
        result = env.step(action)
        assert result[0] == observation and result[1:4] == (0.0, False, False), (page, action)
        assert not result[4]["action_valid"] and env.steps == steps and env.page == page


def test_clicks_of_buttons_not_on_the_page_are_invalid(env):
    env.reset(seed=7)
    _assert_invalid(env, ["click[buy now]", "click[next >]", f"click[{env.goal.asin}]", "search[]", "search[  ]"])
    env.step(f"search[{env.goal.instruction}]")
    assert env.page == "results"
    unlisted = next(p.asin for i, p in enumerate(env.products) if i not in env.results)
    _assert_invalid(env, ["click[buy now]", "click[description]", f"click[{unlisted}]", "click[< prev]", "search[x]"])
    env.step(f"click[{env.products[env.results[0]].asin}]")
    assert env.page == "item"
    _assert_invalid(env, ["click[next >]", "click[purple]", f"click[{env.products[env.results[1]].asin}]"])
    env.step("click[reviews]")
    assert env.page == "sub"
    _assert_invalid(env, ["click[buy now]", "click[features]", "click[]", "click[" + "x" * 100_000 + "]"])


def test_pages_navigation_and_listed_actions(env):
    observation, _ = env.reset(seed=3)
    assert observation.endswith("Available actions: search[<keywords>]")
    observation = env.step("search[dress machine washable]")[0]
    assert "page 1 of 5" in observation and "click[next >]" in observation and "click[< prev]" not in observation
    observation = env.step("click[ NEXT > ]")[0]  # case and spaces ignored
    assert "page 2 of 5" in observation and "click[< prev]" in observation
    asin = env.products[env.results[10]].asin
    observation = env.step(f"click[{asin}]")[0]
    first_value = env.products[env.item].options[0][1][0]
    env.step(f"click[{first_value.upper()}]")
    observation = env.step("click[features]")[0]
    assert observation.startswith(f"Instruction: {env.goal.instruction}\nFeatures of ")
    observation = env.step("click[< prev]")[0]  # back to the item: the selection is kept
    assert f": {first_value}" in observation.split("Selected: ")[1]
    observation = env.step("click[< prev]")[0]  # back to the results page the item came from
    assert "page 2 of 5" in observation and env.item is None
    observation = env.step("click[back to search]")[0]
    assert env.page == "search" and env.steps == 8


def test_budget_truncates_and_later_steps_are_inert():
    env = make("webshop", max_steps=2)
    env.reset(seed=0)
    assert env.step("search[blanket]")[3] is False
    observation, reward, terminated, truncated, info = env.step("click[back to search]")
    assert (reward, terminated, truncated, info["action_valid"]) == (0.0, False, True, True)
    late = env.step("search[pillow]")
    assert late[:4] == (observation, 0.0, False, True) and not late[4]["action_valid"]


def test_buying_ends_and_later_steps_are_inert(env):
    open_target(env, 11)
    observation, _, terminated, _, _ = env.step("click[buy now]")
    assert terminated and "Thank you for shopping" in observation
    assert env.step("click[buy now]")[:4] == (observation, 0.0, True, False)


def _goal_after_reset(env, seed):
    env.reset(seed=seed)
    return goal_key(env.goal)


def test_train_and_validation_goals_are_disjoint():
    train, validation = make("webshop", num_products=300), make("webshop", num_products=300, split="validation")
    train_goals = {_goal_after_reset(train, seed) for seed in range(150)}
    validation_goals = {_goal_after_reset(validation, seed) for seed in range(150)}
    assert not train_goals & validation_goals and len(validation_goals) > 100
    assert {split_of(key) for key in validation_goals} == {"validation"}


def test_catalogue_is_a_pure_function_of_size_and_seed(env):
    assert generate_catalogue(50, 3) == generate_catalogue(50, 3) != generate_catalogue(50, 4)
    assert len({p.asin for p in env.products}) == len(env.products) == 2000


def test_no_two_values_of_one_option_fuzzy_match():
    for _, options, _, _ in CATEGORIES.values():
        for values in options.values():
            for a, b in itertools.combinations(values, 2):
                assert fuzz.token_set_ratio(a, b) <= 85, (a, b)


def test_instruction_text():
    text = goal_instruction("dress", ("machine washable",), {"color": "blue", "size": "medium"}, 40.0)
    assert text == "i need a dress that is machine washable, with color: blue and size: medium, and price lower than " \
        "40.00 dollars"  # fmt: skip


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_steps": 0}, "max_steps"),
        ({"num_products": 5}, "num_products"),
        ({"reward": "dense"}, "reward"),
        ({"source": "web"}, "source"),
        ({"source": "local"}, "path="),
        ({"split": "test"}, "split"),
    ],
)
def test_bad_options_are_loud(options, message):
    with pytest.raises(ValueError, match=message):
        make("webshop", **options)


# ---- the real WebShop files -------------------------------------------------------------------------------------
def test_local_files_load_products_options_and_goals():
    products, goals = load_webshop(str(FIXTURE))
    by_asin = {p.asin: p for p in products}
    assert len(products) == 5 and len(goals) == 6  # the instruction for an unknown ASIN is left out
    assert dict(by_asin["B09GHI9012"].options) == {"flavor name": ("jasmine", "mint | lemon")}
    assert by_asin["B08DEF5678"].price == 45.0 and by_asin["B01JKL3456"].price == 100.0  # range, empty pricing
    assert by_asin["B07ABC1234"].attributes == ("machine washable", "short sleeve", "polyester spandex")
    tea = next(g for g in goals if g.asin == "B09GHI9012")
    assert tea.options == ("mint | lemon",) and tea.price_upper in (20.0, 30.0, 40.0)  # caps above 8.49: 10..40
    assert tea.instruction.endswith(f", and price lower than {tea.price_upper:.2f} dollars")


@pytest.mark.parametrize("split", ["train", "validation"])
def test_local_oracle_buys_each_goal_at_score_one(split):
    env = make("webshop", source="local", path=str(FIXTURE), split=split)
    check_env(env)
    assert {split_of(goal_key(g)) for g in env.goals} == {split}
    for seed in range(len(env.goals) * 3):
        open_target(env, seed)
        for value in env.goal.options:
            env.step(f"click[{value}]")
        assert env.step("click[buy now]")[4]["raw_score"] == 1.0


def test_local_file_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="expects a directory"):
        make("webshop", source="local", path=str(tmp_path / "missing"))
    shutil.copy(FIXTURE / "items_human_ins.json", tmp_path)
    with pytest.raises(FileNotFoundError, match="items_shuffle_1000.json"):
        make("webshop", source="local", path=str(tmp_path))
    (tmp_path / "items_shuffle_1000.json").write_text("[{")
    with pytest.raises(ValueError, match="items_shuffle_1000.json is not valid JSON"):
        make("webshop", source="local", path=str(tmp_path))
    (tmp_path / "items_shuffle_1000.json").write_text(json.dumps({"asin": "x"}))
    with pytest.raises(ValueError, match="must hold a JSON list"):
        make("webshop", source="local", path=str(tmp_path))


def test_parse_price():
    assert parse_price("$1,299.00 - $1,500.00") == 1299.0 and parse_price(None) == 100.0


# ---- fuzz --------------------------------------------------------------------------------------------------------
SPECIAL = st.sampled_from(
    ["search[", "search[]", "click[", "click[]", "click[next >", "click[buy now]", "click[< prev]", "click[b0",
     "search[" + "word " * 20_000 + "]", "click[" + "x" * 100_000 + "]", "search[blue dress]", "click[back to search]"]
)  # fmt: skip
ACTIONS = st.one_of(
    st.text(max_size=40), SPECIAL, st.text(max_size=20).map(lambda t: f"click[{t}]"), st.integers(0, 20)
)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), script=st.lists(ACTIONS, max_size=12))
def test_step_never_raises_on_odd_text(seed, script):
    """Odd text, mixed with clicks of listed buttons (an int picks one) so that episodes move on and end."""
    env = make("webshop", num_products=300)
    env.reset(seed=seed)
    for action in script:
        if isinstance(action, int):
            buttons = list(env.buttons()) or ["buy now"]
            action = f"click[{buttons[action % len(buttons)]}]"
        observation, reward, terminated, truncated, info = env.step(action)
        assert observation == env.render() and math.isfinite(reward) and 0.0 <= reward <= 1.0
        assert type(terminated) is bool and type(truncated) is bool and type(info["action_valid"]) is bool
        assert observation.split("\n")[-1].startswith("Available actions: ")


def test_missing_rapidfuzz_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "rapidfuzz", None)  # import rapidfuzz now raises ImportError
    with pytest.raises(ImportError, match=r"pip install rapidfuzz"):
        score(DRESS, ("blue",), GOAL)


@pytest.mark.parametrize("module", [catalogue, shop_reward, webshop_data])
def test_doctests(module):
    outcome = doctest.testmod(module)
    assert outcome.attempted > 0 and outcome.failed == 0
