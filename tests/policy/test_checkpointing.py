"""Activation checkpointing of the update's forward pass: same values and gradients, layers really recomputed."""

import torch

from mirl.policy.checkpointing import checkpointed_layers
from mirl.policy.tiny import tiny_policy
from mirl.types import SamplingParams


def _loss_and_grads(policy, ids, mask):
    policy.model.zero_grad(set_to_none=True)
    logp, entropy = policy.token_logprobs(ids, mask, with_entropy=True, temperature=0.7)
    loss = -(logp.sum() + 0.1 * entropy.sum())
    loss.backward()
    return logp.detach(), {n: p.grad.clone() for n, p in policy.model.named_parameters()}


def test_checkpointed_update_equals_plain_and_recomputes_layers():
    policy = tiny_policy(seed=3)
    ids = torch.randint(3, 200, (3, 17), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[1, 12:] = False
    plain_logp, plain_grads = _loss_and_grads(policy, ids, mask)

    layer = policy.model.model.layers[0]
    calls = []
    handle = layer.self_attn.register_forward_hook(lambda *_: calls.append(1))
    policy.activation_checkpointing = True
    ckpt_logp, ckpt_grads = _loss_and_grads(policy, ids, mask)
    handle.remove()
    assert len(calls) == 2  # forward, then the recomputation in backward
    torch.testing.assert_close(ckpt_logp, plain_logp, rtol=0, atol=1e-6)
    for name, grad in plain_grads.items():
        torch.testing.assert_close(ckpt_grads[name], grad, rtol=1e-5, atol=1e-7, msg=name)
    # the switch is scoped: eval mode and generation with a KV cache are untouched afterwards
    assert not layer.training and not layer.gradient_checkpointing
    with torch.no_grad():
        gens = policy.generate([[5, 6, 7]], SamplingParams(max_new_tokens=5, stop=(), seed=1))
    policy.activation_checkpointing = False
    with torch.no_grad():
        again = policy.generate([[5, 6, 7]], SamplingParams(max_new_tokens=5, stop=(), seed=1))
    assert gens == again


def test_disabled_or_no_grad_changes_nothing():
    policy = tiny_policy()
    with checkpointed_layers(policy.model, enabled=False) as count:
        assert count == 0
    with checkpointed_layers(policy.model) as count:
        assert count == len(policy.model.model.layers)
        assert all(layer.gradient_checkpointing for layer in policy.model.model.layers)
        assert not policy.model.model.layers[0].mlp.training  # children keep eval mode (no dropout)
    assert not any(layer.gradient_checkpointing for layer in policy.model.model.layers)


def test_no_full_vocabulary_logits_are_kept_for_backward():
    # every chunk's logits are recomputed in backward, one chunk at a time: nothing of width V is saved
    policy = tiny_policy(seed=4)
    vocab = policy.model.get_output_embeddings().weight.shape[0]
    policy.max_logit_elements = 10 * vocab  # chunks of 10 positions
    ids = torch.randint(3, 200, (2, 23), generator=torch.Generator().manual_seed(1))
    saved = []

    def pack(tensor):
        saved.append(tuple(tensor.shape))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logp, entropy = policy.token_logprobs(ids, torch.ones_like(ids), with_entropy=True)
    (logp.sum() + entropy.sum()).backward()
    assert saved and not [shape for shape in saved if shape and shape[-1] == vocab]
