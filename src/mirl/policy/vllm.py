"""Optional vLLM generation backend: vLLM samples, the wrapped :class:`HFPolicy` scores and trains.

Needs ``pip install 'mirl[vllm]'`` (vLLM >= 0.10.2, for ``logprobs_mode``) and a CUDA GPU; both are checked when a
:class:`VLLMPolicy` is built, never at import. Semantics match :meth:`HFPolicy.generate` where vLLM allows it:

- log-probs are vLLM's ``processed_logprobs`` (after temperature). vLLM applies top-p before reporting them, so
  ``top_p < 1`` is refused rather than returning log-probs of a different distribution than the HF backend;
- stop strings end the reply at the completing token, which is kept (``include_stop_str_in_output``); eos and the
  template's end-of-turn token end it with ``"eos"``;
- with ``sampling.seed`` set, row r gets the request seed ``seed * 1000003 + r``: reproducible, and K copies of one
  prompt still draw different samples. Streams differ from the HF backend's.

After each optimiser step call :meth:`VLLMPolicy.sync_weights` so vLLM samples from the current weights.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

import torch

from mirl.policy.hf import HFPolicy, check_sampling
from mirl.types import Generation, SamplingParams


def require_vllm() -> None:
    """Raise with the fix when vLLM or a CUDA GPU is missing."""
    if importlib.util.find_spec("vllm") is None:
        raise ImportError("the vllm backend needs vLLM; install with: pip install 'mirl[vllm]' (or use backend=hf)")
    if not torch.cuda.is_available():
        raise RuntimeError("the vllm backend needs a CUDA GPU and none is visible; set model.backend=hf")


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


def _load_weights(worker, weights) -> None:
    """Runs inside each vLLM worker: copy (name, tensor) pairs into its model."""
    worker.model_runner.model.load_weights(weights=weights)


class VLLMPolicy:
    """``Policy`` whose ``generate`` runs on vLLM; ``score``, ``token_logprobs`` and the model stay with ``hf``."""

    def __init__(self, hf: HFPolicy, *, gpu_memory_utilization: float = 0.4, **llm_kwargs) -> None:
        require_vllm()
        from vllm import LLM

        self.hf = hf
        self.model, self.tokenizer, self.device, self.dtype = hf.model, hf.tokenizer, hf.device, hf.dtype
        source = hf.model.config.name_or_path
        self.llm = LLM(
            model=source,
            dtype=str(hf.dtype).removeprefix("torch."),
            gpu_memory_utilization=gpu_memory_utilization,
            logprobs_mode="processed_logprobs",
            **llm_kwargs,
        )

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        check_sampling(sampling)
        if sampling.top_p < 1.0:
            raise ValueError(
                f"the vllm backend reports log-probs after top-p truncation, so it needs top_p=1, got "
                f"{sampling.top_p}; set rollout.top_p=1 or model.backend=hf"
            )
        from vllm import SamplingParams as VLLMSampling
        from vllm import TokensPrompt

        requests = [
            VLLMSampling(
                max_tokens=sampling.max_new_tokens,
                temperature=sampling.temperature,
                seed=seed,
                stop=list(sampling.stop),
                stop_token_ids=sorted(self.hf.stop_token_ids),
                include_stop_str_in_output=True,
                skip_special_tokens=False,
                logprobs=0,
            )
            for seed in row_seeds(sampling.seed, len(prompts))
        ]
        inputs = [TokensPrompt(prompt_token_ids=[int(t) for t in p]) for p in prompts]
        outputs = self.llm.generate(inputs, requests, use_tqdm=False)
        generations = []
        for out in outputs:
            sample = out.outputs[0]
            ids = tuple(int(t) for t in sample.token_ids)
            logprobs = tuple(float(step[token].logprob) for step, token in zip(sample.logprobs, ids, strict=True))
            generations.append(Generation(ids, logprobs, finish_reason(sample.finish_reason, sample.stop_reason)))
        return generations

    def score(self, prefixes, continuations) -> list[torch.Tensor]:
        return self.hf.score(prefixes, continuations)

    def token_logprobs(self, input_ids, attention_mask, **kwargs):
        return self.hf.token_logprobs(input_ids, attention_mask, **kwargs)

    @torch.no_grad()
    def sync_weights(self) -> None:
        """Copy the HF model's current weights into the vLLM engine (call after each optimiser step)."""
        weights = [(name, tensor.detach()) for name, tensor in self.hf.model.state_dict().items()]
        self.llm.collective_rpc(_load_weights, args=(weights,))

    def eval(self) -> VLLMPolicy:
        self.hf.eval()
        return self

    def train(self, mode: bool = True) -> VLLMPolicy:
        self.hf.train(mode)
        return self

    def save(self, directory) -> None:
        self.hf.save(directory)
