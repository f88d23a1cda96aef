"""The in-process tiny tokenizer and model used by every test that needs a language model."""

import pytest
import torch

from mirl.policy.sources import load_model_and_tokenizer
from mirl.policy.tiny import tiny_model, tiny_policy, tiny_qwen2_model, tiny_tokenizer
from mirl.types import SamplingParams


def test_tokenizer_round_trips_ascii_and_agent_text():
    tok = tiny_tokenizer()
    texts = [
        "<think>The goal is Down.</think><answer>Down || Left</answer>",
        "".join(chr(c) for c in range(32, 127)) + "\n\t\r",
        "  leading spaces, trailing  \n\n",
        "<|im_start|>user\nhi<|im_end|>\n",
    ]
    for text in texts:
        assert tok.decode(tok.encode(text), skip_special_tokens=False) == text


def test_tokenizer_special_tokens_and_vocab():
    tok = tiny_tokenizer()
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert 256 < len(tok) <= 2048
    # special tokens are single ids
    assert len(tok.encode("<|im_start|><|im_end|><|endoftext|>")) == 3
    # training merged the frequent agent words: "<think>" takes fewer tokens than its 7 bytes
    assert len(tok.encode("<think>")) < 7


def test_tokenizer_chat_template_is_chatml():
    chat = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    text = tiny_tokenizer().apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"


def test_tokenizer_is_cached():
    assert tiny_tokenizer() is tiny_tokenizer()


def test_model_is_seeded_without_touching_global_rng():
    state = torch.get_rng_state()
    first, again, other = tiny_model(seed=3), tiny_model(seed=3), tiny_model(seed=4)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(first.lm_head.weight, again.lm_head.weight)
    assert not torch.equal(first.lm_head.weight, other.lm_head.weight)


def test_model_matches_tokenizer_and_is_in_eval_mode():
    model = tiny_model(hidden_size=32, num_layers=1, num_heads=2, dtype=torch.float64)
    assert model.config.vocab_size == len(tiny_tokenizer())
    assert not model.training
    assert model.lm_head.weight.dtype == torch.float64
    logits = model(torch.tensor([[1, 2, 3]])).logits  # (1, 3, V)
    assert logits.shape == (1, 3, len(tiny_tokenizer()))


def test_qwen2_model_has_tied_embeddings_grouped_query_attention_and_biases():
    state = torch.get_rng_state()
    model, again = tiny_qwen2_model(seed=3), tiny_qwen2_model(seed=3)
    assert torch.equal(torch.get_rng_state(), state)
    assert type(model).__name__ == "Qwen2ForCausalLM" and not model.training
    assert model.lm_head.weight is model.model.embed_tokens.weight
    attention = model.model.layers[0].self_attn
    assert model.config.num_attention_heads == 2 * model.config.num_key_value_heads
    assert attention.k_proj.out_features * 2 == attention.q_proj.out_features
    for proj in (attention.q_proj, attention.k_proj, attention.v_proj):
        assert proj.bias is not None and proj.bias.abs().max() > 0.05  # drawn, not left at zero
    assert attention.o_proj.bias is None
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters(), strict=True))
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        tiny_qwen2_model(num_heads=4, num_kv_heads=3)
    with pytest.raises(ValueError, match="unknown tiny model 'gpt2'"):
        tiny_policy(arch="gpt2")


def test_qwen2_policy_samples_scores_and_reloads_consistently(tmp_path):
    """Sampled log-probs = teacher-forced scores (the KV-cache path with grouped-query attention and biases), and
    the saved directory loads back tied and with the same outputs (what `mirl train model.name=DIR` reads)."""
    policy = tiny_policy(arch="qwen2", seed=1)
    tok = policy.tokenizer
    prompts = [tok.encode("<|im_start|>user\nGo to the goal.<|im_end|>\n<|im_start|>assistant\n"), tok.encode("P_O_")]
    gens = policy.generate(prompts, SamplingParams(max_new_tokens=12, stop=(), seed=0))
    scores = policy.score(prompts, [list(g.token_ids) for g in gens])
    for gen, score in zip(gens, scores, strict=True):
        torch.testing.assert_close(torch.tensor(gen.logprobs), score, rtol=0, atol=1e-4)
    policy.save(tmp_path)
    model, _ = load_model_and_tokenizer(str(tmp_path), dtype="float32", device="cpu")
    assert model.lm_head.weight is model.model.embed_tokens.weight
    ids = torch.tensor([prompts[0]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, policy.model(ids).logits, rtol=0, atol=1e-6)
