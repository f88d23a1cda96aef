"""The vLLM backend against a real engine (CPU build): run with `bash scripts/test-vllm.sh`; skipped without vLLM.

Every test runs on two tiny models with head_dim 64 (hidden 256, 4 query heads; vLLM's CPU attention needs a
supported head size) in float32, saved to a directory for vLLM: the Llama, and a Qwen2 with tied input and output
embeddings, grouped-query attention (2 key-value heads) and q/k/v biases, the parts of a Qwen checkpoint whose
loading and weight sync differ from a Llama's. Tolerance for log-probs: 1e-4 absolute per token. Both sides
compute in float32 but with different kernels (vLLM's CPU attention and packed linears vs PyTorch's), which leaves
differences of a few 1e-5 over a 100-token context; a wrong temperature, a stale weight or a shifted position
gives differences of 1e-1 and more.
"""

import copy
import os

import pytest
import torch

# The main test run skips these with the reason below (listed by -ra); scripts/test-vllm.sh sets MIRL_REQUIRE_VLLM=1,
# so there a missing or broken vLLM is an error instead of a skip.
if os.environ.get("MIRL_REQUIRE_VLLM") == "1":
    import vllm  # noqa: F401
else:
    pytest.importorskip("vllm", reason="vLLM tests run in their own environment: bash scripts/test-vllm.sh")

from mirl.policy.tiny import tiny_policy  # noqa: E402
from mirl.policy.vllm import VLLMPolicy  # noqa: E402
from mirl.types import SamplingParams  # noqa: E402

ATOL = 1e-4


MODELS = {
    "llama": {"arch": "llama", "hidden_size": 256, "num_heads": 4, "seed": 1},
    "qwen2": {"arch": "qwen2", "hidden_size": 256, "num_heads": 4, "num_kv_heads": 2, "seed": 1},
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def policy(request):
    hf = tiny_policy(**MODELS[request.param])  # head_dim 64
    engine = VLLMPolicy(hf, max_model_len=512)
    yield engine
    engine.close()


def _prompts(tokenizer) -> list[list[int]]:
    chats = [
        "You are on a frozen lake. Reach the goal G without falling into a hole O.",
        "Push the box onto the target.",
        "Countdown: use the numbers 3, 7, 25 and 50 to make 100.",
    ]
    texts = [
        tokenizer.apply_chat_template([{"role": "user", "content": c}], tokenize=False, add_generation_prompt=True)
        for c in chats
    ]
    return [tokenizer.encode(text + "<think>", add_special_tokens=False) for text in texts]


@torch.no_grad()
def _teacher_forced(hf, prompt, reply, temperature: float) -> torch.Tensor:
    """log_softmax(logits / T)[reply token] at every reply position, from the HF model (T = 0 scored at T = 1)."""
    ids = torch.tensor([list(prompt) + list(reply)])
    logits = hf.model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()  # (len(reply), V)
    logp = (logits / (temperature or 1.0)).log_softmax(-1)
    return logp.gather(-1, torch.tensor(reply)[:, None]).squeeze(-1)


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_sampled_logprobs_match_teacher_forced_logprobs(policy, temperature):
    prompts = _prompts(policy.tokenizer)
    sampling = SamplingParams(max_new_tokens=24, temperature=temperature, seed=3)
    generations = policy.generate(prompts, sampling)
    for prompt, gen in zip(prompts, generations, strict=True):
        assert len(gen.token_ids) == len(gen.logprobs) >= 1
        expected = _teacher_forced(policy.hf, prompt, gen.token_ids, temperature)
        torch.testing.assert_close(torch.tensor(gen.logprobs), expected, rtol=0, atol=ATOL)
        if temperature == 1.0:  # the native scorer (temperature 1) agrees too
            native = policy.hf.score([prompt], [list(gen.token_ids)])[0]
            torch.testing.assert_close(torch.tensor(gen.logprobs), native, rtol=0, atol=ATOL)
        if gen.finish_reason == "eos":
            assert gen.token_ids[-1] in policy.stop_token_ids
        else:
            assert gen.finish_reason == "length" and len(gen.token_ids) == 24


def test_seeds_make_rows_reproducible_and_copies_differ(policy):
    prompt = _prompts(policy.tokenizer)[0]
    sampling = SamplingParams(max_new_tokens=16, temperature=1.0, seed=11)
    first = policy.generate([prompt] * 4, sampling)
    again = policy.generate([prompt] * 4, sampling)
    assert [g.token_ids for g in first] == [g.token_ids for g in again]
    assert len({g.token_ids for g in first}) > 1  # the four copies of one prompt draw different samples
    other = policy.generate([prompt] * 4, SamplingParams(max_new_tokens=16, temperature=1.0, seed=12))
    assert [g.token_ids for g in other] != [g.token_ids for g in first]


def test_a_stop_string_ends_the_reply_at_its_completing_token(policy):
    prompts = _prompts(policy.tokenizer)
    generations = policy.generate(prompts, SamplingParams(max_new_tokens=48, temperature=1.0, seed=5, stop=("e",)))
    assert any(g.finish_reason == "stop" for g in generations)
    for gen in generations:
        if gen.finish_reason == "stop":
            assert "e" in policy.tokenizer.decode(list(gen.token_ids))
            assert "e" not in policy.tokenizer.decode(list(gen.token_ids[:-1]))


def test_engine_logprobs_follow_the_weights_after_a_sync(policy):
    prompt = sum(_prompts(policy.tokenizer), []) * 4  # long enough to fill whole KV-cache blocks
    sampling = SamplingParams(max_new_tokens=16, temperature=1.0, seed=7)
    before = policy.generate([prompt], sampling)[0]  # also leaves this prompt's blocks in the prefix cache
    torch.testing.assert_close(
        torch.tensor(before.logprobs), _teacher_forced(policy.hf, prompt, before.token_ids, 1.0), rtol=0, atol=ATOL
    )
    old = copy.deepcopy(policy.hf)
    optimizer = torch.optim.SGD(policy.model.parameters(), lr=0.5)
    for param in policy.model.parameters():
        param.grad = torch.randn_like(param) * 0.1
    optimizer.step()  # an in-place update, as the trainer's
    policy.sync_weights()
    after = policy.generate([prompt], sampling)[0]
    new = _teacher_forced(policy.hf, prompt, after.token_ids, 1.0)
    stale = _teacher_forced(old, prompt, after.token_ids, 1.0)
    torch.testing.assert_close(torch.tensor(after.logprobs), new, rtol=0, atol=ATOL)
    assert (torch.tensor(after.logprobs) - stale).abs().max() > 0.05  # an engine left on the old weights fails


def test_generate_syncs_by_itself_when_the_weights_changed(policy):
    """One tensor changed in place, no explicit sync: a weight, the input embedding (the Qwen2's output head too, tied)
    and a key-projection bias (the Qwen2's)."""
    prompt = _prompts(policy.tokenizer)[2]
    params = dict(policy.model.model.named_parameters())
    names = [
        n
        for n in ("layers.0.mlp.down_proj.weight", "embed_tokens.weight", "layers.1.self_attn.k_proj.bias")
        if n in params
    ]
    assert len(names) == (3 if policy.model.config.model_type == "qwen2" else 2)
    for seed, name in enumerate(names):
        before = _teacher_forced(policy.hf, prompt, prompt[-8:], 1.0)
        with torch.no_grad():
            params[name].mul_(-1.0)  # no explicit sync afterwards
        assert (_teacher_forced(policy.hf, prompt, prompt[-8:], 1.0) - before).abs().max() > 0.05, name  # it shows
        gen = policy.generate([prompt], SamplingParams(max_new_tokens=12, temperature=1.0, seed=seed))[0]
        expected = _teacher_forced(policy.hf, prompt, gen.token_ids, 1.0)
        torch.testing.assert_close(torch.tensor(gen.logprobs), expected, rtol=0, atol=ATOL, msg=name)


def test_a_lora_model_is_served_with_its_adapters_merged(policy):
    """The trainer wraps the model in LoRA adapters; the engine must sample from W + (alpha / r) B A."""
    pytest.importorskip("peft")
    from mirl.trainer.setup import lora_model

    prompt = _prompts(policy.tokenizer)[1]
    plain = copy.deepcopy(policy.hf)
    policy.model = lora_model(policy.model, rank=4, alpha=8, seed=0)  # mirl's own wrapping: all linear layers
    try:
        with torch.no_grad():  # fresh adapters have B = 0; give them a delta that changes the distribution
            for name, param in policy.model.named_parameters():
                if "lora_B" in name:
                    param.normal_(0, 0.2)
        gen = policy.generate([prompt], SamplingParams(max_new_tokens=12, temperature=1.0, seed=4))[0]
        expected = _teacher_forced(policy.hf, prompt, gen.token_ids, 1.0)
        torch.testing.assert_close(torch.tensor(gen.logprobs), expected, rtol=0, atol=ATOL)
        base_only = _teacher_forced(plain, prompt, gen.token_ids, 1.0)
        assert (torch.tensor(gen.logprobs) - base_only).abs().max() > 0.05  # adapters left out would fail
    finally:
        policy.model = policy.model.unload()


def test_plain_load_weights_does_not_reach_the_cpu_engine(policy):
    """Why the sync goes through reload_weights: the CPU build repacks linear weights and empties the originals."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        pytest.skip("the repacking is the CPU build's")

    def load_in_place(worker, weights):
        worker.model_runner.model.load_weights(weights=weights)

    from mirl.policy.vllm import engine_weights

    with pytest.raises(Exception, match="weight_loader|Attempted to load weight"):
        policy.llm.collective_rpc(load_in_place, args=(engine_weights(policy.model),))
