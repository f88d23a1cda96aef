"""The update's pass with shared prompts packed equals the padded pass: log-probs, entropies and gradients."""

import pytest
import torch

from mirl.policy.shared_prompts import MIN_SHARED, plan
from mirl.policy.tiny import tiny_policy, tiny_tokenizer


def batch(rows: list[list[int]], left: bool):
    longest = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), longest, dtype=torch.long)  # (B, T)
    mask = torch.zeros(len(rows), longest, dtype=torch.bool)  # (B, T)
    for i, row in enumerate(rows):
        span = slice(longest - len(row), longest) if left else slice(0, len(row))
        ids[i, span], mask[i, span] = torch.tensor(row), True
    return ids, mask


def grouped_rows(seed: int = 0) -> list[list[int]]:
    """Two groups (3 and 2 rows) sharing 40- and 25-token prompts, rests of 1 to 30 tokens, and a lone row."""
    g = torch.Generator().manual_seed(seed)
    vocab = len(tiny_tokenizer())
    draw = lambda n: torch.randint(3, vocab, (n,), generator=g).tolist()  # noqa: E731
    a, b = draw(40), draw(25)
    return [a + draw(30), b + draw(5), a + draw(1), draw(33), a + draw(17), b + draw(22)]


def logprobs_and_grads(policy, ids, mask, share: bool):
    policy.share_prompts = share
    policy.model.zero_grad()
    weights = torch.linspace(-1, 1, ids.numel()).view(ids.shape)
    logp, entropy = policy.token_logprobs(ids, mask, with_entropy=True, temperature=0.7)
    ((logp * weights).sum() + entropy.sum()).backward()
    grads = {n: p.grad.clone() for n, p in policy.model.named_parameters() if p.grad is not None}
    return logp.detach(), entropy.detach(), grads


@pytest.mark.parametrize("left", [False, True])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_packed_pass_equals_the_padded_pass(left, checkpointing):
    policy = tiny_policy(seed=3)
    policy.activation_checkpointing = checkpointing
    ids, mask = batch(grouped_rows(), left)
    packed = logprobs_and_grads(policy, ids, mask, share=True)
    padded = logprobs_and_grads(policy, ids, mask, share=False)
    torch.testing.assert_close(packed[0], padded[0], rtol=0, atol=1e-5)
    torch.testing.assert_close(packed[1], padded[1], rtol=0, atol=1e-5)
    assert packed[2].keys() == padded[2].keys() and len(padded[2]) > 0
    for name, grad in padded[2].items():  # float rounding differs with the shapes: compare whole tensors
        assert (packed[2][name] - grad).norm() <= 1e-5 * grad.norm(), name


def test_shared_prompts_go_through_the_decoder_once():
    policy = tiny_policy(seed=3)
    ids, mask = batch(grouped_rows(), left=False)
    seen = []
    hook = policy.model.get_input_embeddings().register_forward_hook(lambda m, args, out: seen.append(args[0]))
    try:
        for share in (True, False):
            policy.share_prompts = share
            with torch.no_grad():
                policy.token_logprobs(ids, mask)
    finally:
        hook.remove()
    # packed rows: 40 + 30 + 1 + 17, 25 + 5 + 22 and the lone 33 tokens (173 of 278 real), padded to 88
    assert tuple(seen[0].shape) == (3, 88) and int(mask.sum()) == 278
    assert seen[1].shape == ids.shape


def test_plan_cuts_sorted_rows_into_runs_of_shared_prompts():
    a, b = [7] * 30, [8] * 20
    rows = [a + [1, 2], [3] * 5, b + [4], a + [5], b + [6, 6], a, [9] * (MIN_SHARED - 1) + [1], [9] * MIN_SHARED]
    runs = plan(rows, per_token=1.0, per_pair=0.0)
    assert sorted(i for members, _ in runs for i in members) == list(range(len(rows)))
    shared = {tuple(sorted(members)): s for members, s in runs}
    assert shared[(0, 3, 5)] == 29  # a row that is the prompt alone keeps its last token in its own rest
    assert shared[(2, 4)] == 20
    assert shared[(1,)] == 5 and shared[(6,)] == MIN_SHARED and shared[(7,)] == MIN_SHARED  # too short to share


def test_plan_keeps_rows_apart_when_attention_over_a_long_packed_row_costs_more():
    rows = [[7] * 20 + [i] * 200 for i in range(4)]
    assert all(len(m) == 1 for m, _ in plan(rows, per_token=1.0, per_pair=1.0))
    assert len(plan(rows, per_token=1.0, per_pair=0.0)) == 1


def test_vision_policies_take_the_padded_pass():
    from mirl.policy.tiny_vl import tiny_vl_policy

    assert tiny_vl_policy().share_prompts is False


def test_the_model_share_prompts_setting_turns_packing_off():
    from mirl.algorithms import get_preset
    from mirl.config import Config
    from mirl.trainer.setup import build_learner

    config = Config()
    policy = build_learner(tiny_policy(seed=3), config, get_preset("grpo")).policy
    assert policy.share_prompts is True
    config.model.share_prompts = False
    assert build_learner(tiny_policy(seed=3), config, get_preset("grpo")).policy.share_prompts is False
