"""Cross-scoring: prefix-shared scores equal a full re-encode; the matrices mean what REFERENCE §3 says."""

import doctest
import random

import pytest
import torch

from mirl.diagnostics import mi_proxies, scoring
from mirl.diagnostics.scoring import score_grid, score_matrix
from mirl.policy.tiny import tiny_policy


@pytest.fixture(scope="module")
def policy():
    return tiny_policy(seed=1)


def random_ids(rng: random.Random, length: int) -> list[int]:
    return [rng.randrange(3, 600) for _ in range(length)]


@pytest.fixture(scope="module")
def problem():
    """4 prompts (two token-identical, one of 3 tokens) and 5 reasonings from 1 to 120 tokens."""
    rng = random.Random(0)
    prompts = [random_ids(rng, n) for n in (40, 65, 3)]
    prompts.insert(2, list(prompts[0]))  # column 2 duplicates column 0
    reasonings = [random_ids(rng, n) for n in (1, 7, 33, 120, 2)]
    return prompts, reasonings


def test_doctests():
    assert doctest.testmod(scoring).failed == 0


def test_prefix_shared_scoring_equals_naive_full_re_encode(policy, problem):
    prompts, reasonings = problem
    shared_seq, shared_tok = score_matrix(policy, prompts, reasonings, mode="shared")
    naive_seq, naive_tok = score_matrix(policy, prompts, reasonings, mode="naive", max_batch_tokens=256)
    assert shared_seq.shape == (5, 4) and shared_seq.dtype == torch.float64
    torch.testing.assert_close(shared_tok, naive_tok, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(shared_seq, naive_seq, rtol=1e-5, atol=1e-5)
    # the duplicate prompt scores identically: its prefix is encoded once and its cache shared
    assert torch.equal(shared_seq[:, 0], shared_seq[:, 2])


def test_naive_scores_do_not_depend_on_the_micro_batch_split(policy, problem):
    prompts, reasonings = problem
    one_row, _ = score_matrix(policy, prompts, reasonings, mode="naive", max_batch_tokens=1)
    many_rows, _ = score_matrix(policy, prompts, reasonings, mode="naive", max_batch_tokens=100_000)
    torch.testing.assert_close(one_row, many_rows, rtol=1e-5, atol=1e-5)


def test_a_cell_is_the_teacher_forced_log_prob_of_the_reasoning(policy, problem):
    prompts, reasonings = problem
    per_seq, per_token = score_matrix(policy, prompts, reasonings)
    # cell (3, 1) by hand: S = sum_t log p(z_3,t | x_1, z_3,<t) from one forward of x_1 + z_3
    ids = torch.tensor([prompts[1] + reasonings[3]])
    with torch.no_grad():
        logp, _ = policy.token_logprobs(ids, torch.ones_like(ids, dtype=torch.bool))
    expected = logp[0, len(prompts[1]) :].double().sum()
    torch.testing.assert_close(per_seq[3, 1], expected, rtol=1e-5, atol=1e-5)
    # L = S / |z_i|, exactly
    lengths = torch.tensor([len(z) for z in reasonings], dtype=torch.float64)
    assert torch.equal(per_token, per_seq / lengths[:, None])
    assert (per_seq < 0).all()


def test_score_grid_sums_only_the_scored_suffix(policy, problem):
    prompts, reasonings = problem
    conts = [reasonings[3], reasonings[2]]
    full, _ = score_grid(policy, [[prompts[0]], [prompts[1]]], [[c] for c in conts], [len(c) for c in conts])
    tail, tail_tok = score_grid(policy, [[prompts[0]], [prompts[1]]], [[c] for c in conts], [5, 1])
    per_token = policy.score([prompts[0], prompts[1]], conts)
    torch.testing.assert_close(full[:, 0], torch.stack([p.double().sum() for p in per_token]))
    torch.testing.assert_close(
        tail[:, 0], torch.stack([per_token[0][-5:].double().sum(), per_token[1][-1:].double().sum()])
    )
    torch.testing.assert_close(tail_tok[:, 0], tail[:, 0] / torch.tensor([5.0, 1.0], dtype=torch.float64))
    naive, _ = score_grid(policy, [[prompts[0]], [prompts[1]]], [[c] for c in conts], [5, 1], mode="naive")
    torch.testing.assert_close(naive, tail, rtol=1e-5, atol=1e-5)


def test_identical_prompts_give_zero_mutual_information(policy, problem):
    # one prompt repeated in every column: each row is constant, so matched = marginal and MI = 0 (log N cancels)
    prompts, reasonings = problem
    _, per_token = score_matrix(policy, [prompts[1]] * 3, reasonings)
    out = mi_proxies(per_token, torch.tensor([0, 1, 2, 0, 1]))
    assert abs(out["mi_estimate"]) < 1e-9


@pytest.mark.parametrize(
    ("prompts", "reasonings", "kwargs", "message"),
    [
        ([[5, 6]], [[7], []], {}, "reasonings must be non-empty"),
        ([], [[7]], {}, "prompts must hold at least one"),
        ([[5, 6]], [[7]], {"mode": "fast"}, "mode must be one of shared, naive"),
    ],
)
def test_bad_inputs_say_what_was_expected(policy, prompts, reasonings, kwargs, message):
    with pytest.raises(ValueError, match=message):
        score_matrix(policy, prompts, reasonings, **kwargs)


def test_score_grid_checks_its_shape_and_suffix_lengths(policy):
    with pytest.raises(ValueError, match="2 rows x 1 columns"):
        score_grid(policy, [[[1]], [[1]]], [[[2]]], [1, 1])
    with pytest.raises(ValueError, match=r"row 0: scored must be in \[1, shortest continuation = 2\]"):
        score_grid(policy, [[[1]]], [[[2, 3]]], [3])


FROZENLAKE_SYSTEM = (
    "You are a FrozenLake agent. Reach the goal G without falling into a hole O. Actions: Left, Down, Right, Up."
)
FILLER = ["carefully", "indeed", "perhaps", "certainly", "quickly", "slowly", "honestly", "clearly", "surely"]


def frozenlake_prompt(tokenizer, rng: random.Random) -> tuple[list[int], str]:
    """A first-turn context (chat template + "<think>") for a random 4x4 board, and a reasoning restating it."""
    player, goal, *holes = rng.sample(range(16), 4)
    grid = [["_"] * 4 for _ in range(4)]
    grid[player // 4][player % 4], grid[goal // 4][goal % 4] = "P", "G"
    for hole in holes:
        grid[hole // 4][hole % 4] = "O"
    where = f"row {player // 4}, column {player % 4}", f"row {goal // 4}, column {goal % 4}"
    user = (
        "Turn 1. State:\n" + "\n".join("".join(row) for row in grid) + f"\nPlayer at {where[0]}. Goal at {where[1]}."
        "\nAlways output: <think> [Your thoughts] </think> <answer> [your answer] </answer>"
    )
    messages = [{"role": "system", "content": FROZENLAKE_SYSTEM}, {"role": "user", "content": user}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + "<think>"
    return tokenizer.encode(
        text, add_special_tokens=False
    ), f"The player is at {where[0]} and the goal is at {where[1]}."


@pytest.mark.slow
def test_smollm2_retrieves_state_grounded_reasoning_but_not_a_varied_template():
    """The paper's claim on a real model: entropy is blind to input dependence, cross-scoring is not.

    16 boards (chance 1/16). Grounded: two reasonings per board restating its own positions. Template: one fixed
    sentence plus 8 random filler words per sample, varied but independent of the board, so its entropy is high.
    """
    from mirl.diagnostics.info import RegimeThresholds
    from mirl.policy import HFPolicy

    policy = HFPolicy.load("smollm2-135m-instruct", device="cpu", dtype="float32").eval()
    tok, rng = policy.tokenizer, random.Random(0)
    boards = [frozenlake_prompt(tok, rng) for _ in range(16)]
    prompts = [ids for ids, _ in boards]
    grounded, template, true_col = [], [], []
    for j, (_, restated) in enumerate(boards):
        grounded += [restated, restated.replace("The player is", "I am").replace("the goal is", "G is")]
        template += [
            "Let me think about the best move. " + " ".join(rng.choice(FILLER) for _ in range(8)) + "."
            for _ in range(2)
        ]
        true_col += [j, j]
    true_col = torch.tensor(true_col)
    results = {}
    for name, texts in (("grounded", grounded), ("template", template)):
        reasonings = [tok.encode(text, add_special_tokens=False) for text in texts]
        _, per_token = score_matrix(policy, prompts, reasonings)
        results[name] = mi_proxies(per_token, true_col, ks=(1, 4))
    grounded_out, template_out = results["grounded"], results["template"]
    assert grounded_out["retrieval_chance"] == template_out["retrieval_chance"] == 1 / 16
    # measured: grounded retrieval 0.94, MI-Est 0.32 nats/token; template retrieval 0.03, MI-Est 0.001
    assert grounded_out["retrieval_acc"] >= 0.5 and grounded_out["mi_estimate"] > 0.2
    assert template_out["retrieval_acc"] <= 1 / 16 + 0.1 and abs(template_out["mi_estimate"]) < 0.05
    # the template's entropy is high (measured 5.8 nats/token, the grounded reasoning's 1.2): entropy alone would
    # call the template the healthier of the two
    assert template_out["conditional_entropy"] > 2 * grounded_out["conditional_entropy"]
    assert RegimeThresholds().classify(template_out) == "template_collapse"


@pytest.mark.parametrize("mode", ["shared", "naive"])
def test_progress_adds_up_to_the_planned_tokens_and_changes_no_number(policy, problem, mode):
    prompts, reasonings = problem
    plain = score_matrix(policy, prompts, reasonings, mode=mode, max_batch_tokens=512)
    steps: list[int] = []
    tracked = score_matrix(policy, prompts, reasonings, mode=mode, max_batch_tokens=512, progress=steps.append)
    for a, b in zip(plain, tracked, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    planned = scoring.grid_tokens([prompts] * 5, [[z] * 4 for z in reasonings], mode)
    assert sum(steps) == planned and len(steps) > 1 and min(steps) > 0
    # shared: 3 distinct prompts (40 + 65 + 3 tokens) once, every reasoning under each of the 3 distinct prompts
    # (the two columns holding the same prompt make identical cells, which policy.score scores once)
    # naive: every cell re-encodes its prompt: 5 x (40 + 65 + 40 + 3) + 4 x (1 + 7 + 33 + 120 + 2)
    assert planned == {"shared": 108 + 3 * 163, "naive": 5 * 148 + 4 * 163}[mode]


def test_progress_chunks_keep_every_prefix_in_one_call():
    prefixes = [[1, 2], [3], [1, 2], [4, 5, 6], [3]]
    continuations = [[7]] * 5
    chunks = scoring._prefix_chunks(prefixes, continuations, steps=3)
    assert sorted(c for chunk in chunks for c in chunk) == [0, 1, 2, 3, 4]
    for chunk in chunks:
        for c in chunk:  # a cell's prefix never shows up in another chunk
            assert not any(prefixes[o] == prefixes[c] for other in chunks if other is not chunk for o in other)
