"""The optional vLLM backend: what can be checked without vLLM or a GPU."""

import importlib.util

import pytest
import torch

from mirl.policy import vllm as vllm_backend
from mirl.policy.tiny import tiny_policy


def test_missing_vllm_or_gpu_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match=r"pip install 'mirl\[vllm\]'"):
        vllm_backend.VLLMPolicy(tiny_policy())
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="backend=hf"):
        vllm_backend.VLLMPolicy(tiny_policy())


def test_row_seeds_differ_per_row_and_none_stays_none():
    assert vllm_backend.row_seeds(None, 2) == [None, None]
    seeds = vllm_backend.row_seeds(5, 4)
    assert len(set(seeds)) == 4 and seeds == vllm_backend.row_seeds(5, 4)


def test_finish_reason_mapping():
    assert vllm_backend.finish_reason("length", None) == "length"
    assert vllm_backend.finish_reason("stop", "</answer>") == "stop"
    assert vllm_backend.finish_reason("stop", None) == "eos"  # eos token
    assert vllm_backend.finish_reason("stop", 2) == "eos"  # a stop token id
