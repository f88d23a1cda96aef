"""The model a command names: a hub id, a local directory, a ``.gguf`` file, or a mirl run or checkpoint.

A run directory ``RUN`` or a checkpoint ``RUN/checkpoints/iteration_N`` is loaded as the base model named by
``RUN/config.yaml`` (with its LoRA settings) carrying the checkpoint's trained weights, LoRA merged in; ``RUN``
means its newest complete checkpoint; checkpoints are read by ``mirl.trainer.checkpoint.load_checkpoint``.
"""

from __future__ import annotations

from pathlib import Path


def load_named_policy(name: str, *, device: str = "auto", dtype: str = "auto", max_batch_tokens: int = 8192):
    """The policy ``name`` names (module docstring), in eval mode; the device is checked before any file is read."""
    from mirl.policy.sources import find_run_weights, resolve_device

    resolve_device(device)
    found = find_run_weights(name)
    if found is None:
        from mirl.policy import HFPolicy
        from mirl.policy.sources import model_modality

        policy_class = HFPolicy
        if model_modality(name) == "vision":
            from mirl.policy.hf_vision import VisionPolicy

            policy_class = VisionPolicy
        return policy_class.load(name, device=device, dtype=dtype, max_batch_tokens=max_batch_tokens).eval()
    from mirl.config_files import load_config

    overrides = [f"model.device={device}", f"model.dtype={dtype}", f"diagnostics.max_batch_tokens={max_batch_tokens}"]
    config = load_config(found.run_dir / "config.yaml", overrides, saved=True)
    return load_run_policy(found.run_dir, found.checkpoint, config)


def load_run_policy(run_dir: Path, checkpoint: Path | None, config):
    """The run's base model (``config.model``) with the weights of ``checkpoint`` (None = the newest)."""
    from mirl.trainer.run import load_trained_policy

    if checkpoint is None:
        return load_trained_policy(run_dir, config).eval()
    from mirl.trainer.checkpoint import MISFIT, load_checkpoint, misfit_error
    from mirl.trainer.setup import _lora, load_policy

    state = load_checkpoint(checkpoint)  # before the model: a refused checkpoint costs no load
    policy = load_policy(config)
    if config.model.lora_rank > 0:
        policy.model = _lora(policy.model, config)
    try:
        policy.model.load_state_dict(state["policy"])
    except MISFIT as error:
        raise misfit_error(checkpoint, error) from None
    if config.model.lora_rank > 0:
        policy.model = policy.model.merge_and_unload()
    return policy.eval()
