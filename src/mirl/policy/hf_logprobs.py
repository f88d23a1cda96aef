"""Training log-probs of :class:`~mirl.policy.hf.HFPolicy`, and the chunked head that scoring shares.

Logits are computed only at the positions asked for (real tokens; the response tokens when the trainer passes
``needed``), in chunks of positions so the (positions, V) tensor never exceeds ``policy.max_logit_elements``. With
gradient enabled each chunk is checkpointed, so the backward pass also keeps only one chunk of logits alive; with
``policy.activation_checkpointing`` the decoder layers are checkpointed too (:mod:`mirl.policy.checkpointing`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from mirl.policy.checkpointing import checkpointed_layers
from mirl.policy.shared_prompts import applies, shared_prompt_hidden


def token_logprobs(
    policy,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    with_entropy: bool = False,
    chunk: int | None = None,
    temperature: float = 1.0,
    needed: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs (and entropies) of a padded batch, with gradient.

    ``logp[:, t] = log p_T(ids[t] | ids[<t])`` and ``entropy[:, t] = H(p_T(. | ids[<t]))`` with
    ``p_T = softmax(logits / temperature)``: pass the rollout's sampling temperature so the policy being
    optimised is the one that sampled (the PPO ratio at the first update is then exactly 1). Column 0,
    positions where ``attention_mask`` is False and a left-padded row's first real token have no context and
    hold 0. Positions are ``cumsum(mask) - 1``, so left and right padding both work. ``needed`` (B, T, bool), e.g.
    the response mask, limits the positions computed: the others hold 0 too and cost no logits, which in a
    multi-turn row (mostly prompt) saves most of the head's compute and memory. ``chunk`` = positions per
    log-softmax chunk (None: from ``max_logit_elements``). Call it inside the trainer's autocast/grad context.
    """
    if not temperature > 0:
        raise ValueError(
            f"temperature must be > 0 (the sampling temperature of the rollout), got {temperature}; greedy "
            "replies (temperature 0) carry log-probs at temperature 1, so pass temperature=1.0 for them"
        )
    if input_ids.dim() != 2 or input_ids.shape != attention_mask.shape:
        raise ValueError(
            f"input_ids and attention_mask must both be (B, T), got {tuple(input_ids.shape)} and "
            f"{tuple(attention_mask.shape)}"
        )
    if needed is not None and needed.shape != input_ids.shape:
        raise ValueError(f"needed must be (B, T) like input_ids, got {tuple(needed.shape)}")
    input_ids = input_ids.to(policy.device)
    mask = attention_mask.to(policy.device).bool()  # (B, T)
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)  # (B, T)
    # a token counts when it and its predecessor are real: column 0 and a left-padded row's first token do not
    counted = mask & F.pad(mask[:, :-1], (1, 0), value=False)  # (B, T)
    # a vision policy's keyed ids hold an image's handle (< 0) on its placeholders: features, not predicted tokens
    counted = counted & (input_ids >= 0)
    if needed is not None:
        counted = counted & needed.to(policy.device).bool()
    with checkpointed_layers(policy.model, policy.activation_checkpointing and torch.is_grad_enabled()):
        # rows that start with the same prompt encode it once (mirl.policy.shared_prompts); None: no two share one
        hidden = shared_prompt_hidden(policy, input_ids, mask) if applies(policy) else None
        if hidden is None:
            hidden = policy._backbone(input_ids, mask.long(), positions)  # (B, T, H)
    logp, entropy = logprobs_from_hidden(
        policy,
        hidden[:, :-1],
        input_ids[:, 1:].clamp(min=0),
        where=counted[:, 1:],
        with_entropy=with_entropy,
        chunk=chunk,
        temperature=float(temperature),
    )  # (B, T - 1) each, 0 where not counted
    logp = F.pad(logp, (1, 0))  # (B, T)
    return logp, (F.pad(entropy, (1, 0)) if entropy is not None else None)


def logprobs_from_hidden(policy, hidden, targets, *, where=None, with_entropy=False, chunk=None, temperature=1.0):
    """log p(targets[:, t]) under ``logits(hidden[:, t]) / temperature``; (B, T) each.

    Only the positions where ``where`` (B, T, bool) is True are computed (all when None); the others hold 0 and
    cost no logits. The computed positions go through the head ``chunk`` at a time.
    """
    rows, length = targets.shape
    if where is None:
        flat_hidden, flat_targets = hidden.flatten(0, 1), targets.flatten()  # (B*T, H), (B*T,)
    else:
        flat_hidden, flat_targets = hidden[where], targets[where]  # (N, H), (N,)
    vocab = policy.model.get_output_embeddings().weight.shape[0]
    chunk = chunk or max(1, policy.max_logit_elements // vocab)
    pieces = []
    for start in range(0, max(1, len(flat_targets)), chunk):  # one (empty) chunk when N = 0 keeps the graph
        args = (policy, flat_hidden[start : start + chunk], flat_targets[start : start + chunk], with_entropy)
        if torch.is_grad_enabled() and hidden.requires_grad:
            pieces.append(checkpoint(_chunk_logprobs, *args, temperature, use_reentrant=False))
        else:
            pieces.append(_chunk_logprobs(*args, temperature))
    outputs = [torch.cat([piece[0] for piece in pieces])]  # (N,)
    if with_entropy:
        outputs.append(torch.cat([piece[1] for piece in pieces]))  # (N,)
    if where is None:
        outputs = [out.view(rows, length) for out in outputs]
    else:
        outputs = [out.new_zeros(rows, length).masked_scatter(where, out) for out in outputs]
    return outputs[0], (outputs[1] if with_entropy else None)


def _chunk_logprobs(policy, hidden: torch.Tensor, targets: torch.Tensor, with_entropy: bool, temperature: float):
    logits = policy._head(hidden)  # (C, V)
    if temperature != 1.0:
        logits = logits / temperature  # the distribution the rollout sampled from
    log_z = logits.logsumexp(-1)  # (C,)
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - log_z  # (C,)
    if not with_entropy:
        return (logp,)
    # H = -sum_v p_v log p_v = log Z - sum_v p_v * logit_v
    entropy = log_z - (logits.softmax(-1) * logits).sum(-1)  # (C,)
    return logp, entropy
