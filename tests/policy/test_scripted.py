"""The scripted test double of the Policy protocol."""

import math

import pytest

from mirl.policy.base import Policy
from mirl.policy.scripted import ScriptedPolicy
from mirl.policy.tiny import tiny_tokenizer
from mirl.types import SamplingParams

STOP = SamplingParams(max_new_tokens=50, stop=("</answer>",))


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def test_implements_the_protocol(tok):
    assert isinstance(ScriptedPolicy(tok, []), Policy)


def test_list_script_is_consumed_in_prompt_order(tok):
    policy = ScriptedPolicy(tok, ["a</think><answer>Up</answer>", "b</think><answer>Down</answer>"])
    first, second = policy.generate([[1], [2]], STOP)
    assert tok.decode(first.token_ids) == "a</think><answer>Up</answer>"
    assert tok.decode(second.token_ids) == "b</think><answer>Down</answer>"
    assert first.finish_reason == second.finish_reason == "stop"
    assert first.logprobs == (math.log(0.5),) * len(first.token_ids)
    assert policy.calls == [[(1,), (2,)]] and policy.samplings == [STOP]
    with pytest.raises(IndexError, match="ran out of replies"):
        policy.generate([[3]], STOP)


def test_callable_script_sees_the_decoded_context(tok):
    seen = []
    policy = ScriptedPolicy(tok, lambda context: seen.append(context) or "x")
    ids = tok.encode("<|im_start|>user\nhi<|im_end|>", add_special_tokens=False)
    policy.generate([ids], STOP)
    assert seen == ["<|im_start|>user\nhi<|im_end|>"]


def test_reply_ids_are_the_real_tokenization(tok):
    text = "go √ Down</think><answer>Down</answer>"
    [gen] = ScriptedPolicy(tok, [text]).generate([[1]], STOP)
    assert list(gen.token_ids) == tok.encode(text, add_special_tokens=False)


def test_finish_reasons_follow_a_sampler(tok):
    replies = [
        "a</think><answer>Up</answer> and more",  # cut after the stop string
        "a</think><answer>Up<|im_end|> and more",  # cut at eos, eos kept
        "a</think><answer>Up",  # nothing ends it: kept whole
    ]
    stop, eos, whole = ScriptedPolicy(tok, replies).generate([[1]] * 3, STOP)
    assert (stop.finish_reason, tok.decode(stop.token_ids)) == ("stop", "a</think><answer>Up</answer>")
    assert eos.finish_reason == "eos" and eos.token_ids[-1] == tok.eos_token_id
    assert whole.finish_reason == "stop" and tok.decode(whole.token_ids) == "a</think><answer>Up"
    [cut] = ScriptedPolicy(tok, ["a long reply " * 10]).generate([[1]], SamplingParams(max_new_tokens=3))
    assert cut.finish_reason == "length" and len(cut.token_ids) == 3


def test_score_is_the_documented_running_sum_formula():
    # prefix sum 10; continuation 3, 9: running sums 13, 22 -> -0.1 * (1 + 3), -0.1 * (1 + 2)
    [scores] = ScriptedPolicy(None, []).score([[4, 6]], [[3, 9]])
    assert scores.tolist() == pytest.approx([-0.4, -0.3], abs=1e-7)
    [empty] = ScriptedPolicy(None, []).score([[1]], [[]])
    assert empty.shape == (0,)
    with pytest.raises(ValueError, match="as many prefixes as continuations"):
        ScriptedPolicy(None, []).score([[1]], [])


def test_a_bare_string_script_is_rejected(tok):
    with pytest.raises(TypeError, match="wrap it in"):
        ScriptedPolicy(tok, "one reply")
