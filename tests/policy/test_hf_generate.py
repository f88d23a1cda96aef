"""HFPolicy.generate on the tiny model: shapes, finish reasons, stop strings, seeds, sampling semantics."""

import pytest
import torch

from mirl.policy.hf import HFPolicy, end_of_turn_ids, sample_tokens
from mirl.policy.tiny import tiny_model, tiny_policy, tiny_tokenizer
from mirl.types import SamplingParams


@pytest.fixture(scope="module")
def policy():
    return tiny_policy()


@pytest.fixture(scope="module")
def prompts():
    tok = tiny_tokenizer()
    texts = ["<|im_start|>user\nGo to the goal.<|im_end|>\n<|im_start|>assistant\n<think>", "Down ||", "P_O_\n__G_"]
    return [tok.encode(text) for text in texts]


def test_shapes_and_length_finish(policy, prompts):
    gens = policy.generate(prompts, SamplingParams(max_new_tokens=12, stop=(), seed=0))
    assert len(gens) == len(prompts)
    for gen in gens:
        assert len(gen.token_ids) == len(gen.logprobs) <= 12
        assert all(lp <= 0.0 for lp in gen.logprobs)
        if gen.finish_reason == "length":
            assert len(gen.token_ids) == 12
        else:
            assert gen.finish_reason == "eos" and gen.token_ids[-1] in policy.stop_token_ids


def test_empty_batch_and_invalid_arguments(policy):
    assert policy.generate([], SamplingParams()) == []
    with pytest.raises(ValueError, match="empty"):
        policy.generate([[]], SamplingParams())
    with pytest.raises(ValueError, match="top_p"):
        policy.generate([[5]], SamplingParams(top_p=0.0))
    with pytest.raises(ValueError, match="non-empty"):
        policy.generate([[5]], SamplingParams(stop=("",)))
    with pytest.raises(ValueError, match="max_new_tokens"):
        policy.generate([[5]], SamplingParams(max_new_tokens=0))


def test_seed_reproducibility_and_global_rng_untouched(policy, prompts):
    state = torch.get_rng_state()
    a = policy.generate(prompts, SamplingParams(max_new_tokens=16, stop=(), seed=7))
    b = policy.generate(prompts, SamplingParams(max_new_tokens=16, stop=(), seed=7))
    c = policy.generate(prompts, SamplingParams(max_new_tokens=16, stop=(), seed=8))
    assert torch.equal(torch.get_rng_state(), state)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.logprobs for g in a] == [g.logprobs for g in b]
    assert [g.token_ids for g in a] != [g.token_ids for g in c]


def test_stop_string_ends_at_completing_token(policy, prompts):
    # reference: generate without stops, pick a multi-token substring of the reply as the stop string; with the
    # same seed the reply must end at the first token whose full decoded prefix contains it
    tok = policy.tokenizer
    checked = 0
    for seed in range(6):
        free = policy.generate(prompts[:1], SamplingParams(max_new_tokens=24, stop=(), seed=seed))[0]
        if len(free.token_ids) < 10:
            continue
        stop = tok.decode(free.token_ids[4:7])
        expected = next(n for n in range(1, len(free.token_ids) + 1) if stop in tok.decode(free.token_ids[:n]))
        gen = policy.generate(prompts[:1], SamplingParams(max_new_tokens=24, stop=("@@never@@", stop), seed=seed))[0]
        assert gen.finish_reason == "stop"
        assert gen.token_ids == free.token_ids[:expected]
        assert gen.logprobs == free.logprobs[:expected]
        checked += 1
    assert checked >= 3


def test_eos_token_is_included_and_ends_the_reply(prompts):
    model, tok = tiny_model(), tiny_tokenizer()
    free = HFPolicy(model, tok, device="cpu").generate(prompts, SamplingParams(max_new_tokens=20, stop=(), seed=3))
    end_id = free[0].token_ids[5]
    stopping = HFPolicy(model, tok, device="cpu", stop_token_ids=[end_id])
    gens = stopping.generate(prompts, SamplingParams(max_new_tokens=20, stop=(), seed=3))
    first = free[0].token_ids.index(end_id) + 1
    assert gens[0].token_ids == free[0].token_ids[:first] and gens[0].finish_reason == "eos"
    for gen, ref in zip(gens, free, strict=True):
        assert gen.token_ids == ref.token_ids[: len(gen.token_ids)]
        assert (gen.finish_reason == "eos") == (end_id in ref.token_ids)


def test_default_stop_ids_include_template_end_of_turn():
    tok = tiny_tokenizer()
    assert tiny_policy().stop_token_ids == {tok.convert_tokens_to_ids("<|im_end|>")}
    other = tok.__class__(tokenizer_object=tok.backend_tokenizer, eos_token="<|endoftext|>")
    other.chat_template = tok.chat_template
    ids = {tok.convert_tokens_to_ids("<|endoftext|>"), tok.convert_tokens_to_ids("<|im_end|>")}
    assert end_of_turn_ids(other) == ids


def test_left_padding_invariance(policy, prompts):
    # prompt A's reply must not depend on the other prompts: same ids, log-probs at float precision
    a, short, long = prompts[0], prompts[1][:2], prompts[2] * 6
    sampling = SamplingParams(max_new_tokens=20, stop=(), seed=11)
    alone = policy.generate([a], sampling)[0]
    for batch in ([a, short], [a, long], [a, long, short]):
        gen = policy.generate(batch, sampling)[0]
        assert gen.token_ids == alone.token_ids
        torch.testing.assert_close(torch.tensor(gen.logprobs), torch.tensor(alone.logprobs), rtol=0, atol=1e-4)


def test_temperature_logprobs_are_of_the_tempered_distribution(policy, prompts):
    gen = policy.generate(prompts[:1], SamplingParams(max_new_tokens=8, temperature=0.7, stop=(), seed=2))[0]
    ids = torch.tensor([prompts[0] + list(gen.token_ids)])  # (1, T)
    with torch.no_grad():
        logits = policy.model(ids).logits[0, len(prompts[0]) - 1 : -1]  # (n, V)
    expected = (logits / 0.7).log_softmax(-1).gather(-1, ids[0, len(prompts[0]) :, None]).squeeze(-1)
    torch.testing.assert_close(torch.tensor(gen.logprobs), expected, rtol=0, atol=1e-5)


def test_tiny_top_p_is_greedy_and_keeps_untruncated_logprobs(policy, prompts):
    greedy = policy.generate(prompts, SamplingParams(max_new_tokens=10, temperature=0.0, stop=()))
    nucleus = policy.generate(prompts, SamplingParams(max_new_tokens=10, top_p=1e-6, stop=(), seed=5))
    for g, n in zip(greedy, nucleus, strict=True):
        assert g.token_ids == n.token_ids
        torch.testing.assert_close(torch.tensor(g.logprobs), torch.tensor(n.logprobs), rtol=0, atol=1e-6)
        assert max(n.logprobs) < 0.0  # log-probs before truncation, not log(1) = 0


def test_inverse_cdf_sampling_frequencies():
    # probs (0.5, 0.3, 0.2); 1000 evenly spaced uniforms u = (i + 0.5) / 1000 land 500 / 300 / 200 times
    logits = torch.tensor([0.5, 0.3, 0.2]).log().expand(1000, 3)  # (1000, 3)
    uniform = (torch.arange(1000) + 0.5) / 1000  # (1000,)
    tokens, logp = sample_tokens(logits, uniform, 1.0, 1.0)
    assert torch.bincount(tokens, minlength=3).tolist() == [500, 300, 200]
    torch.testing.assert_close(logp, torch.tensor([0.5, 0.3, 0.2]).log()[tokens])
    # top-p 0.75: token 2's preceding mass 0.8 >= 0.75 drops it; kept (0.5, 0.3) renormalise to 0.625 / 0.375
    tokens, logp = sample_tokens(logits, uniform, 1.0, 0.75)
    assert torch.bincount(tokens, minlength=3).tolist() == [625, 375, 0]
    torch.testing.assert_close(logp, torch.tensor([0.5, 0.3, 0.2]).log()[tokens])


def test_replies_never_pass_the_model_positions_or_the_total_budget():
    policy = tiny_policy()
    policy.max_positions = 20
    prompts = [list(range(3, 18)), list(range(3, 10))]  # 15 and 7 tokens
    gens = policy.generate(prompts, SamplingParams(max_new_tokens=64, stop=(), seed=0))
    assert [len(g.token_ids) for g in gens if g.finish_reason == "length"] == [5, 13]  # 20 - 15, 20 - 7
    gens = policy.generate(prompts, SamplingParams(max_new_tokens=64, stop=(), seed=0, max_total_tokens=17))
    assert [len(g.token_ids) for g in gens if g.finish_reason == "length"] == [2, 10]
    with pytest.raises(ValueError, match="prompts\\[0\\] has 20 tokens, leaving no room"):
        policy.generate([list(range(3, 23))], SamplingParams(max_new_tokens=4, seed=0))


def test_generate_reports_each_reply_as_it_ends():
    """Rows with less room end sooner: the listener hears each reply at its own step, and all of them in all."""
    from mirl.policy.base import replies_listened

    policy = tiny_policy()
    prompts = [[5] * 3, [6] * 5, [7] * 7]  # room 7, 5, 3 tokens under max_total_tokens=10
    heard = []
    sampling = SamplingParams(max_new_tokens=10, temperature=1.0, seed=3, max_total_tokens=10)
    with replies_listened(heard.append):
        generations = policy.generate(prompts, sampling)
    assert sum(heard) == 3 and len(heard) == len({len(g.token_ids) for g in generations}), (heard, generations)
    assert policy.generate(prompts, sampling) == generations  # nobody listening: same samples, no call
