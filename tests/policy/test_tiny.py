"""The in-process tiny tokenizer and model used by every test that needs a language model."""

import torch

from mirl.policy.tiny import tiny_model, tiny_tokenizer


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
