"""HFPolicy.score and token_logprobs: agreement with sampling, prefix-cache parity, chunking, gradients."""

import pytest
import torch

from mirl.policy.hf import HFPolicy
from mirl.policy.tiny import tiny_policy, tiny_tokenizer
from mirl.types import SamplingParams


@pytest.fixture(scope="module")
def policy():
    return tiny_policy()


def reference_logprobs(policy, prefix, continuation) -> torch.Tensor:
    """Plain full forward on prefix + continuation, full-vocabulary log-softmax: the slow obvious path."""
    ids = torch.tensor([list(prefix) + list(continuation)])  # (1, T)
    with torch.no_grad():
        logp = policy.model(ids).logits[0].double().log_softmax(-1)  # (T, V)
    start = len(prefix)
    return logp[start - 1 : -1].gather(-1, ids[0, start:, None]).squeeze(-1).float()  # (len(continuation),)


def padded(rows: list[list[int]], pad: int = 0):
    longest = max(len(r) for r in rows)
    ids = torch.full((len(rows), longest), pad)  # (B, T) right-padded
    mask = torch.zeros(len(rows), longest, dtype=torch.bool)  # (B, T)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = True
    return ids, mask


def test_generate_score_and_token_logprobs_agree(policy):
    tok = tiny_tokenizer()
    prompts = [tok.encode("<|im_start|>user\nGo.<|im_end|>\n<|im_start|>assistant\n"), tok.encode("Left || Up")]
    gens = policy.generate(prompts, SamplingParams(max_new_tokens=24, stop=(), seed=4))
    scored = policy.score(prompts, [g.token_ids for g in gens])
    ids, mask = padded([p + list(g.token_ids) for p, g in zip(prompts, gens, strict=True)])
    with torch.no_grad():
        trained, _ = policy.token_logprobs(ids, mask)  # (B, T)
    for row, (prompt, gen) in enumerate(zip(prompts, gens, strict=True)):
        sampled = torch.tensor(gen.logprobs)
        torch.testing.assert_close(scored[row], sampled, rtol=0, atol=1e-4)
        span = slice(len(prompt), len(prompt) + len(gen.token_ids))
        torch.testing.assert_close(trained[row, span], sampled, rtol=0, atol=1e-4)


def test_shared_prefix_scoring_equals_full_forward():
    # prefixes of 2, 9 and 30 tokens, continuations of 1 to 60 tokens, duplicated prefixes, and a token budget
    # small enough that each prefix group is split over several micro-batches
    policy = tiny_policy(seed=1)
    policy.max_batch_tokens = 150
    g = torch.Generator().manual_seed(0)
    vocab = len(tiny_tokenizer())
    short, mid, long = (torch.randint(3, vocab, (n,), generator=g).tolist() for n in (2, 9, 30))
    prefixes = [mid, short, long, mid, short, mid, long, mid]
    lengths = [1, 60, 7, 33, 2, 1, 45, 12]
    conts = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in lengths]
    scored = policy.score(prefixes, conts)
    for prefix, cont, logp in zip(prefixes, conts, scored, strict=True):
        assert logp.shape == (len(cont),) and logp.dtype == torch.float32
        torch.testing.assert_close(logp, reference_logprobs(policy, prefix, cont), rtol=0, atol=1e-5)


def test_score_encodes_each_distinct_prefix_once(policy):
    calls = []
    original = policy._encode_prefix
    policy._encode_prefix = lambda prefix, stem=None: calls.append(prefix) or original(prefix, stem)
    try:
        policy.score([[5, 6], [7], [5, 6], [5, 6], [7]], [[1], [2, 3], [4], [], [9, 9, 9]])
    finally:
        del policy._encode_prefix
    assert calls == [(5, 6), (7,)]


def test_prefixes_that_begin_alike_share_the_encoding_of_their_stem():
    # a 40-token "system prompt" begins every prefix; two of them also share a 35-token first turn; one prefix is
    # the system prompt itself; one prefix shares only 3 tokens (too few for a pass of their own)
    policy = tiny_policy(seed=5)
    g = torch.Generator().manual_seed(3)
    vocab = len(tiny_tokenizer())
    draw = lambda n: torch.randint(3, vocab, (n,), generator=g).tolist()  # noqa: E731
    system, turn = draw(40), draw(35)
    prefixes = [
        system + turn + draw(6),
        system + draw(12),
        system,
        system + turn + draw(9),
        system[:3] + draw(20),
        system + draw(12),
    ]
    conts = [draw(n) for n in (5, 9, 3, 14, 7, 2)]
    encoded = []  # (prefix length, tokens this call encoded)
    original = policy._encode_prefix

    def spy(prefix, stem=None):
        encoded.append((len(prefix), len(prefix) - (stem[1] if stem else 0)))
        return original(prefix, stem)

    policy._encode_prefix = spy
    try:
        scored = policy.score(prefixes, conts)
    finally:
        del policy._encode_prefix
    for prefix, cont, logp in zip(prefixes, conts, scored, strict=True):
        torch.testing.assert_close(logp, reference_logprobs(policy, prefix, cont), rtol=0, atol=1e-5)
    # the system prompt (a prefix itself) once, the shared first turn once, then only each prefix's own tail
    assert sorted(encoded) == sorted([(23, 23), (40, 40), (52, 12), (52, 12), (75, 35), (81, 6), (84, 9)])


def test_score_edge_cases(policy):
    out = policy.score([[5, 6], [5, 6]], [[], [8]])
    assert out[0].shape == (0,) and out[1].shape == (1,)
    assert policy.score([], []) == []
    with pytest.raises(ValueError, match="empty"):
        policy.score([[]], [[1]])
    with pytest.raises(ValueError, match="one prefix per continuation"):
        policy.score([[1]], [[1], [2]])


def test_token_logprobs_alignment_padding_and_entropy(policy):
    rows = [[5, 9, 14, 200, 31, 7], [40, 41, 42]]
    ids, mask = padded(rows, pad=policy.pad_token_id)
    with torch.no_grad():
        logp, entropy = policy.token_logprobs(ids, mask, with_entropy=True)  # (2, 6) each
    assert logp.shape == entropy.shape == (2, 6)
    assert torch.all(logp[:, 0] == 0) and torch.all(logp[1, 3:] == 0) and torch.all(entropy[1, 3:] == 0)
    for row, tokens in enumerate(rows):
        torch.testing.assert_close(logp[row, 1 : len(tokens)], reference_logprobs(policy, tokens[:1], tokens[1:]))
        with torch.no_grad():
            full = policy.model(torch.tensor([tokens])).logits[0, :-1].double().log_softmax(-1)  # (n-1, V)
        expected = -(full.exp() * full).sum(-1).float()  # H = -sum p log p
        torch.testing.assert_close(entropy[row, 1 : len(tokens)], expected, rtol=1e-5, atol=1e-5)


def test_left_padded_token_logprobs_equal_right_padded(policy):
    rows = [[5, 9, 14, 200, 31, 7], [40, 41, 42]]
    right_ids, right_mask = padded(rows)
    left_ids, left_mask = torch.zeros_like(right_ids), torch.zeros_like(right_mask)
    left_ids[1, 3:], left_mask[1, 3:] = torch.tensor(rows[1]), True
    left_ids[0], left_mask[0] = right_ids[0], right_mask[0]
    with torch.no_grad():
        right, _ = policy.token_logprobs(right_ids, right_mask)
        left, _ = policy.token_logprobs(left_ids, left_mask)
    assert left[1, 3] == 0  # first real token: no context
    torch.testing.assert_close(left[1, 3:], right[1, :3], rtol=0, atol=1e-5)


def test_chunked_equals_unchunked_values_and_gradients():
    policy = tiny_policy(seed=2)
    ids, mask = padded([[5, 9, 14, 200, 31, 7, 8, 9], [40, 41, 42, 43, 44]])
    results = []
    for chunk in (1, 3, 64):
        policy.model.zero_grad()
        logp, entropy = policy.token_logprobs(ids, mask, with_entropy=True, chunk=chunk)
        (logp.sum() + 0.1 * entropy.sum()).backward()
        results.append((logp.detach(), entropy.detach(), policy.model.lm_head.weight.grad.clone()))
    for logp, entropy, grad in results[:2]:
        torch.testing.assert_close(logp, results[2][0], rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(entropy, results[2][1], rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(grad, results[2][2], rtol=1e-5, atol=1e-6)
    assert results[2][2].abs().sum() > 0


def test_needed_positions_alone_are_computed_with_the_same_values_and_gradients():
    policy = tiny_policy(seed=6)
    ids, mask = padded([[5, 9, 14, 200, 31, 7, 8, 9], [40, 41, 42, 43, 44]])
    needed = torch.zeros_like(mask)
    needed[0, 5:8], needed[1, 2:4] = True, True  # "response" tokens
    results = []
    for positions in (None, needed):
        policy.model.zero_grad()
        logp, entropy = policy.token_logprobs(ids, mask, with_entropy=True, temperature=0.7, needed=positions)
        ((logp * needed).sum() + 0.1 * (entropy * needed).sum()).backward()
        results.append((logp.detach(), entropy.detach(), policy.model.lm_head.weight.grad.clone()))
    (full_logp, full_entropy, full_grad), (logp, entropy, grad) = results
    torch.testing.assert_close(logp, full_logp * needed, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(entropy, full_entropy * needed, rtol=1e-6, atol=1e-6)
    assert (logp[~needed] == 0).all() and (entropy[~needed] == 0).all()
    torch.testing.assert_close(grad, full_grad, rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="needed must be"):
        policy.token_logprobs(ids, mask, needed=needed[:, 1:])


def test_no_needed_position_still_gives_a_graph():
    policy = tiny_policy(seed=6)
    ids, mask = padded([[5, 9, 14]])
    logp, _ = policy.token_logprobs(ids, mask, needed=torch.zeros_like(mask))
    assert (logp == 0).all()
    logp.sum().backward()  # a micro-batch with no response token must not break the update


def test_save_and_load_round_trip(policy, tmp_path):
    policy.save(tmp_path / "ckpt")
    loaded = HFPolicy.load(tmp_path / "ckpt", device="cpu")
    assert loaded.dtype == torch.float32 and loaded.stop_token_ids == policy.stop_token_ids
    prefix, cont = [[5, 6, 7]], [[8, 9, 10, 11]]
    torch.testing.assert_close(loaded.score(prefix, cont)[0], policy.score(prefix, cont)[0], rtol=0, atol=0)
    assert loaded.tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False) == (
        "<|im_start|>user\nx<|im_end|>\n"
    )


def test_train_eval_passthrough():
    policy = tiny_policy()
    assert policy.train() is policy and policy.model.training
    assert policy.eval() is policy and not policy.model.training
