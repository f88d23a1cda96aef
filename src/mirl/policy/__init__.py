"""Policies: the protocol, the transformers backend, model sources and the tiny test model."""

from mirl.policy.base import Policy
from mirl.policy.hf import HFPolicy
from mirl.policy.sources import load_model_and_tokenizer, resolve_model
from mirl.policy.tiny import tiny_model, tiny_policy, tiny_tokenizer

__all__ = [
    "HFPolicy",
    "Policy",
    "load_model_and_tokenizer",
    "resolve_model",
    "tiny_model",
    "tiny_policy",
    "tiny_tokenizer",
]
