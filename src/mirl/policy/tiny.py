"""A tiny tokenizer and a tiny random causal LM, built in-process and offline, for tests and examples.

The tokenizer is a byte-level BPE trained on a small fixed corpus of agent-style text (ChatML turns, ``<think>``
and ``<answer>`` tags, grid observations, ``||``-separated actions), so it round-trips any text and splits agent
replies into realistic multi-byte tokens. Special tokens: ``<|im_start|>``, ``<|im_end|>`` (eos and end of turn),
``<|endoftext|>`` (padding). Its chat template is ChatML, the format SmolLM2 and Qwen use.

The model is a :class:`transformers.LlamaForCausalLM` (:func:`tiny_model`) or, for code that must also handle the
shapes of Qwen-family checkpoints, a :class:`transformers.Qwen2ForCausalLM` with tied input and output embeddings,
grouped-query attention and biases on the query, key and value projections (:func:`tiny_qwen2_model`). Weights are
random, drawn from a seed inside ``torch.random.fork_rng``, so building one never changes the caller's global random
state.
"""

from __future__ import annotations

import functools

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from mirl.policy.sources import CHATML_TEMPLATE

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


_CORPUS_LINES = (
    "<|im_start|>system\nYou are a helpful assistant that solves puzzles step by step.<|im_end|>",
    "<|im_start|>user\nYou are on a frozen lake. Reach the goal G without falling into a hole O.<|im_end|>",
    "<|im_start|>assistant\n<think>The goal is below me, so I should go Down.</think><answer>Down</answer>",
    "<think>I am at the top left. The hole is to the right.</think><answer>Down || Right</answer><|im_end|>",
    "<think>Push the box onto the target: move Left then Up.</think><answer>Left || Up</answer>",
    "<think>There is a wall above, so I go Right.</think><answer>Right || Right</answer>",
    "Turn 1: State:\nP_O_\n__O_\n___G\nYou have 10 actions left. Always output: <think> [Your thoughts] </think>",
    "<answer> [your answer] </answer> with no extra text. Strictly follow this format. Max response length: 100",
    "Available actions: Up, Down, Left, Right. Separate multiple actions with ||.",
    "Reward: 1.0. Reward: 0.0. Invalid action. Format error. The episode is over. You reached the goal!",
    "Sokoban grid: # wall, _ floor, O target, X box, P player, V box on target, S player on target.",
    "#######\n#__O__#\n#__X__#\n#__P__#\n#######",
    "Countdown: use the numbers 3, 7, 25 and 50 to make 100 with + - * / and parentheses.",
    "<answer>(50 - 25) * (7 - 3)</answer> equals 100. The answer is correct.",
    "def solve(x):\n    return x * 2 + 1\nprint(solve(20))",
    "The quick brown fox jumps over the lazy dog. 0123456789 {}[]()<>=+-*/%&|^~!?@#$;:'\",.`\\",
)


def _corpus() -> list[str]:
    # repeated so frequent agent substrings ("<think>", "||", "Down") earn merges
    return list(_CORPUS_LINES) * 8


@functools.lru_cache(maxsize=1)
def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """The byte-level BPE tokenizer of the tiny test model (cached: one training per process).

    >>> tok = tiny_tokenizer()
    >>> tok.decode(tok.encode("<think>go Down</think><answer>Down || Left</answer>"))
    '<think>go Down</think><answer>Down || Left</answer>'
    >>> tok.eos_token, tok.pad_token
    ('<|im_end|>', '<|endoftext|>')
    """
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=768,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(_corpus(), trainer=trainer)
    return chatml_tokenizer(backend)


def chatml_tokenizer(backend: Tokenizer, unk_token: str | None = None) -> PreTrainedTokenizerFast:
    """A :class:`PreTrainedTokenizerFast` over a ``tokenizers`` backend that holds :data:`SPECIAL_TOKENS`: eos and
    end of turn ``<|im_end|>``, padding ``<|endoftext|>`` on the left, no bos, text decoded as it is, ChatML."""
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=unk_token,
        clean_up_tokenization_spaces=False,
        padding_side="left",
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


def _shape(hidden_size: int, num_layers: int, num_heads: int, num_kv_heads: int, vocab_size: int | None = None):
    """The config fields both tiny architectures share: sizes, init range and :func:`tiny_tokenizer`'s ids."""
    tokenizer = tiny_tokenizer()
    return {
        "vocab_size": vocab_size if vocab_size is not None else len(tokenizer),
        "hidden_size": hidden_size,
        "intermediate_size": 2 * hidden_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "max_position_embeddings": 4096,
        "initializer_range": 0.2,
        "bos_token_id": None,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }


def tiny_model(
    vocab_size: int | None = None,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> LlamaForCausalLM:
    """A randomly initialised Llama in eval mode whose vocabulary matches :func:`tiny_tokenizer`.

    Weights are drawn from ``seed`` inside ``torch.random.fork_rng``: the global RNG state is unchanged.
    """
    shape = _shape(hidden_size, num_layers, num_heads, num_heads, vocab_size)
    config = LlamaConfig(**shape, tie_word_embeddings=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.to(dtype).eval()


def tiny_qwen2_model(
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> Qwen2ForCausalLM:
    """A randomly initialised Qwen2 in eval mode whose vocabulary matches :func:`tiny_tokenizer`.

    Shaped like the small Qwen2/2.5 checkpoints: ``lm_head`` shares the input embedding (one tensor), ``num_heads``
    query heads share ``num_kv_heads`` key/value heads, and the q/k/v projections carry biases. Weights are drawn
    from ``seed`` inside ``torch.random.fork_rng``; biases are drawn too (not left at zero) so they matter.

    >>> model = tiny_qwen2_model()
    >>> model.lm_head.weight is model.model.embed_tokens.weight
    True
    >>> attention = model.model.layers[0].self_attn
    >>> attention.k_proj.out_features * 2 == attention.q_proj.out_features, attention.k_proj.bias is not None
    (True, True)
    """
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})")
    shape = _shape(hidden_size, num_layers, num_heads, num_kv_heads)
    config = Qwen2Config(**shape, tie_word_embeddings=True, use_sliding_window=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith("_proj.bias"):
                    param.normal_(0, config.initializer_range)
    return model.to(dtype).eval()


TINY_MODELS = {"llama": tiny_model, "qwen2": tiny_qwen2_model}


def tiny_policy(arch: str = "llama", **kwargs):
    """A :class:`~mirl.policy.hf.HFPolicy` over a tiny model and :func:`tiny_tokenizer` on CPU in fp32.

    ``arch`` picks the model (``"llama"``: :func:`tiny_model`, ``"qwen2"``: :func:`tiny_qwen2_model`); keyword
    arguments go to it (``seed``, ``hidden_size``, ...).
    """
    from mirl.policy.hf import HFPolicy

    if arch not in TINY_MODELS:
        raise ValueError(f"unknown tiny model {arch!r}; choose one of {sorted(TINY_MODELS)}")
    return HFPolicy(TINY_MODELS[arch](**kwargs), tiny_tokenizer(), device="cpu", dtype=torch.float32)
