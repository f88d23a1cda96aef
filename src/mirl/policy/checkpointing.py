"""Activation checkpointing for the update's forward pass, independent of the model's train/eval mode.

The trainer keeps the policy in eval mode (no dropout: the update must score the tokens as the sampler did), and
transformers checkpoints its decoder layers only in train mode. :func:`checkpointed_layers` switches the layers'
checkpointing on for one forward pass: each decoder layer then keeps only its input for the backward pass and
recomputes its activations there, so the activations alive at the peak fall from

    L_layers x tokens x (attention + MLP intermediates)   to   L_layers x tokens x H  +  one layer's intermediates

at the cost of one more forward pass of the decoder in the backward. Dropout inside the layers stays off (only
the layer modules' own ``training`` flag is set, never their children's), and no KV cache is in play.
"""

from __future__ import annotations

import contextlib
import functools

from torch.utils.checkpoint import checkpoint


def _decoder_layers(model) -> list:
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]


@contextlib.contextmanager
def checkpointed_layers(model, enabled: bool = True):
    """Within this block, every transformers decoder layer of ``model`` is activation-checkpointed (non-reentrant).

    The recomputation in the backward pass uses the function saved at forward time, so the backward may run after
    the block has closed. Yields the number of layers switched (0 when the model has none transformers can
    checkpoint, or when ``enabled`` is False: then nothing changes).
    """
    layers = _decoder_layers(model) if enabled else []
    saved = [(m.training, m.gradient_checkpointing, m.__dict__.get("_gradient_checkpointing_func")) for m in layers]
    run = functools.partial(checkpoint, use_reentrant=False)
    try:
        for m in layers:
            m.training, m.gradient_checkpointing, m._gradient_checkpointing_func = True, True, run
        yield len(layers)
    finally:
        for m, (training, flag, func) in zip(layers, saved, strict=True):
            m.training, m.gradient_checkpointing = training, flag
            if func is None:
                m.__dict__.pop("_gradient_checkpointing_func", None)
            else:
                m._gradient_checkpointing_func = func
