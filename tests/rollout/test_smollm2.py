"""The offline default model plays FrozenLake through the engine (slow: loads SmolLM2-135M-Instruct)."""

import pytest
import torch

from mirl.config import RolloutConfig
from mirl.rollout import collate, run_episodes
from mirl.rollout.parsing import decode
from mirl.types import EnvSpec

pytestmark = pytest.mark.slow


def test_smollm2_frozenlake_group_of_four_for_two_turns():
    from mirl.policy import HFPolicy

    policy = HFPolicy.load("smollm2-135m-instruct", device="cpu")
    tok = policy.tokenizer
    config = RolloutConfig(max_turns=2, max_new_tokens=64, temperature=1.0)
    episodes = run_episodes(policy, [EnvSpec("frozenlake", 0)], 4, config, sampling_seed=0)
    assert [(ep.group, ep.sample) for ep in episodes] == [(0, 0), (0, 1), (0, 2), (0, 3)]
    for ep in episodes:
        assert 1 <= ep.num_turns <= 2
        for i, turn in enumerate(ep.turns):
            context = decode(tok, turn.context_ids)
            assert context.startswith("<|im_start|>system\n") and context.endswith("<|im_start|>assistant\n<think>")
            assert f"Turn {i + 1}." in context and "\ufffd" not in context
            reply = decode(tok, turn.response_ids)
            clean = reply.rstrip("\ufffd") if turn.finish_reason == "length" else reply  # a cut may split a char
            assert "\ufffd" not in clean
            assert turn.response_text == "<think>" + reply
        if ep.num_turns == 2:
            first = ep.turns[0]
            assert decode(tok, ep.turns[1].context_ids).startswith(decode(tok, first.context_ids + first.response_ids))
    batch = collate(episodes, pad_id=tok.pad_token_id)
    with torch.no_grad():
        logp, _ = policy.token_logprobs(batch.input_ids, batch.attention_mask)  # (B, T)
    assert (logp - batch.old_logprobs)[batch.response_mask].abs().max() < 1e-4
