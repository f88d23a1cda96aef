"""The transformers backend of :class:`~mirl.policy.base.Policy`: sampling, scoring and training log-probs.

Everything is token ids in, token ids out. Generation is a batched sampling loop written here rather than
``model.generate``, because the rollout needs the exact log-prob of every sampled token, stop strings checked on
the decoded tail, and a seeded local generator:

- identical prompts (the K samples of a group) are prefilled once and their cache rows repeated; inside
  :meth:`HFPolicy.prefix_cache` a prompt that extends an earlier finished row encodes only its new tokens
  (:mod:`mirl.policy.kv`, the prefill in :mod:`mirl.policy.hf_prefill`); set ``prefix_sharing = False`` to encode
  every prompt in full;
- prompts are left-padded; position ids count real tokens only (``cumsum(mask) - 1``), so a prompt gets the same
  positions whatever else is in the batch; finished rows are dropped from the KV cache and stop costing compute;
- one uniform per row per step, a function of (``sampling.seed``, step, row index) drawn from a local CPU generator,
  picks the token by inverse CDF, so a row's sample depends on its own logits and its row index only, never on
  the other prompts, and the global random state is never touched when a seed is given;
- ``logprobs[t] = log_softmax(logits / temperature)[token]`` in float32, before top-p truncation (temperature 0
  means greedy decoding, and its log-probs are then taken at temperature 1);
- a reply ends at the end-of-turn / eos token (included in ``token_ids``, finish reason ``"eos"``), at the token that
  completes a stop string (included, nothing is cut, ``"stop"``) or after ``max_new_tokens`` tokens, or when the
  row's prompt + reply reaches ``sampling.max_total_tokens`` or the model's maximum positions (``"length"``); a
  prompt that leaves no room for one token is refused.

Training log-probs (:meth:`HFPolicy.token_logprobs`) take the sampling temperature and use
``log_softmax(logits / temperature)``, the distribution the rollout sampled from, so the update optimises the policy
that sampled (as veRL's actor does); :meth:`HFPolicy.score` (cross-scoring for the diagnostics) stays at
temperature 1, its documented definition.

Logits are ``lm_head(last_hidden_state)`` (with Gemma-2 style final soft-capping when the config sets it); how the
log-probs are chunked, restricted and checkpointed is in :mod:`mirl.policy.hf_logprobs`.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
from collections.abc import Iterable, Sequence

import torch
from transformers import DynamicCache

from mirl.policy.base import replies_finished
from mirl.policy.hf_logprobs import token_logprobs
from mirl.policy.hf_prefill import prefill
from mirl.policy.hf_scoring import score_cells
from mirl.policy.kv import PrefixStore, appendable, reusable, rows_kv
from mirl.policy.sampler_copy import SamplerCopy
from mirl.policy.sampling import check_sampling, end_of_turn_ids, ends_with_stop, sample_tokens, step_uniforms
from mirl.policy.sources import load_model_and_tokenizer, resolve_device, resolve_dtype
from mirl.types import Generation, SamplingParams

__all__ = ["HFPolicy", "end_of_turn_ids", "sample_tokens"]


@functools.cache
def cache_keyword(decoder_class: type) -> str:
    """The decoder's name for its KV-cache argument: ``cache`` in current transformers (which deprecates
    ``past_key_values`` with a warning on every call), ``past_key_values`` in releases before the rename."""
    parameters = inspect.signature(decoder_class.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


class HFPolicy:
    """A transformers causal LM and its tokenizer seen through token ids (implements ``Policy``).

    Args:
        model: any ``AutoModelForCausalLM``-style model (optionally PEFT-wrapped).
        tokenizer: its tokenizer; ``eos_token_id`` and the chat template's end-of-turn token end a reply.
        device: ``"auto"`` (cuda if available, else cpu), ``"cpu"``, ``"cuda:1"``, ...
        dtype: ``"auto"`` (float32 on CPU, bfloat16 on GPU), a name or a ``torch.dtype``.
        max_batch_tokens: tokens (prefix + continuation, padding included) per scoring forward pass at most.
        stop_token_ids: ids that end a reply; None = eos plus the chat template's end-of-turn token.
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        device: str | torch.device = "auto",
        dtype: str | torch.dtype = "auto",
        max_batch_tokens: int = 8192,
        stop_token_ids: Iterable[int] | None = None,
    ) -> None:
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self.model = model.to(device=self.device, dtype=self.dtype)
        self.tokenizer = tokenizer
        self.max_batch_tokens = int(max_batch_tokens)
        # (rows x positions x V) logits materialised at once at most: 2**25 floats = 128 MiB in float32
        self.max_logit_elements = 2**25
        ids = end_of_turn_ids(tokenizer, model) if stop_token_ids is None else set(stop_token_ids)
        self.stop_token_ids = frozenset(int(i) for i in ids)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad_token_id = int(pad) if pad is not None else 0
        positions = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)
        # the longest sequence the model can encode (prompt + reply); None when the config does not say
        self.max_positions = int(positions) if positions else None
        # encode identical prompts once and, inside prefix_cache(), extend stored caches (mirl.policy.kv)
        self.prefix_sharing = True
        self.prefix_cache_bytes = 2**30  # stored caches of one rollout at most
        self._store: PrefixStore | None = None
        # inside keep_rollout_caches(): what the rollouts' stores held at their end, for scoring
        self._kept: PrefixStore | None = None
        self._keeping = False
        # scoring: pack continuations unpadded into rows of at most max_packed_tokens (mirl.policy.packing)
        self.pack_scoring = True
        self.max_packed_tokens = 512
        # training log-probs: rows that start with the same prompt encode it once (mirl.policy.shared_prompts)
        self.share_prompts = True
        # training log-probs with gradient recompute each decoder layer in backward (mirl.policy.checkpointing)
        self.activation_checkpointing = False
        # prompt tokens given to generate and tokens actually encoded by its prefill (padding excluded)
        self.prefill_tokens = {"prompt": 0, "encoded": 0, "padded": 0}  # padded: positions the passes computed
        self._plain_cache: bool | None = None
        # generate on a copy of the model in another dtype (mirl.policy.sampler_copy); None = on the model itself
        self.sampler_copy: SamplerCopy | None = None

    # ------------------------------------------------------------------ construction and persistence

    @classmethod
    def load(
        cls,
        source: str | os.PathLike,
        *,
        device: str = "auto",
        dtype: str = "auto",
        cache_dir: str | os.PathLike | None = None,
        **kwargs,
    ) -> HFPolicy:
        """Load from a hub id, a local directory, a ``.gguf`` file or ``"smollm2-135m-instruct"``."""
        model, tokenizer = load_model_and_tokenizer(str(source), dtype=dtype, device=device, cache_dir=cache_dir)
        return cls(model, tokenizer, device=device, dtype=dtype, **kwargs)

    def save(self, directory: str | os.PathLike) -> None:
        """Write the model (safetensors) and the tokenizer so :meth:`load` can read them back."""
        self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)

    def sample_in(self, dtype: str | torch.dtype) -> None:
        """Sample in ``dtype`` (``"same"`` = the model's own dtype) while scoring and training stay in the model's.

        >>> from mirl.policy.tiny import tiny_policy
        >>> policy = tiny_policy()
        >>> policy.sample_in("bfloat16"); policy.sampler_copy.dtype
        torch.bfloat16
        >>> policy.sample_in("same"); policy.sampler_copy is None
        True
        """
        resolved = self.dtype if dtype == "same" else resolve_dtype(dtype, self.device)
        self.sampler_copy = None if resolved == self.dtype else SamplerCopy(resolved)

    @property
    def sampler_dtype(self) -> torch.dtype:
        """The dtype the sampler's forward passes run in."""
        return self.dtype if self.sampler_copy is None else self.sampler_copy.dtype

    def eval(self) -> HFPolicy:
        self.model.eval()
        return self

    def train(self, mode: bool = True) -> HFPolicy:
        self.model.train(mode)
        return self

    # ------------------------------------------------------------------ model pieces

    def _backbone(self, input_ids, attention_mask, position_ids, cache=None) -> torch.Tensor:
        """Final hidden states (B, T, H) of the decoder, extending ``cache`` in place when given."""
        decoder = self.model.get_decoder()
        extra = {cache_keyword(type(decoder)): cache} if cache is not None else {}
        out = decoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=cache is not None,
            **extra,
        )
        return out.last_hidden_state

    def _position_shift(self, ids: Sequence[int]) -> int:
        """How far the position after ``ids`` lags ``len(ids)``: 0 for text (a vision policy's images take fewer
        positions than tokens, :mod:`mirl.policy.vision_inputs`)."""
        return 0

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits in float32 from final hidden states (..., H) -> (..., V)."""
        logits = self.model.get_output_embeddings()(hidden).float()
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        return torch.tanh(logits / cap) * cap if cap else logits

    # ------------------------------------------------------------------ training log-probs

    def token_logprobs(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        *,
        with_entropy: bool = False,
        chunk: int | None = None,
        temperature: float = 1.0,
        needed: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per-token log-probs (and entropies) of a padded batch, with gradient: see
        :func:`mirl.policy.hf_logprobs.token_logprobs`."""
        options = {"with_entropy": with_entropy, "chunk": chunk, "temperature": temperature, "needed": needed}
        return token_logprobs(self, input_ids, attention_mask, **options)

    # ------------------------------------------------------------------ scoring

    @torch.no_grad()
    def score(self, prefixes: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """Teacher-forced log p(continuations[i][t] | prefixes[i], continuations[i][:t]), float32 on CPU.

        Identical prefixes (same id tuple) are encoded once and their KV cache serves every continuation that
        follows them; an identical (prefix, continuation) cell is scored once and its result shared. With SDPA or
        eager attention the continuations are packed end to end, unpadded, in rows of at most ``max_packed_tokens``
        (:mod:`mirl.policy.packing`), so a pass computes real tokens only; otherwise (and with ``pack_scoring =
        False``) they go in right-padded micro-batches (longest first, at most ``max_batch_tokens`` per pass).
        """
        return score_cells(self, prefixes, continuations)

    def _encode_prefix(self, prefix: tuple[int, ...], stem=None):
        """The cache of ``prefix`` (per layer (keys, values), each (1, heads, Lp, d)) and its last hidden state.

        ``stem`` = (cache, length) of ``prefix[:length]`` already encoded: only the rest is encoded, after it (the
        stem's tensors are left as they are).
        """
        kv, start = stem if stem is not None else ([], 0)
        kept = self._kept.peek(tuple(prefix)) if self._kept is not None else None
        if kept is not None and start < len(prefix) - 1:  # a rollout encoded all but the last token already
            kv, start = [(k.unsqueeze(0), v.unsqueeze(0)) for k, v in kept], len(prefix) - 1
            self._kept.hits += start
        ids = torch.tensor([prefix[start:]], device=self.device)  # (1, Lp - start)
        shift = self._position_shift(prefix[:start])
        positions = torch.arange(start + shift, len(prefix) + shift, device=self.device).unsqueeze(0)  # (1, Lp - start)
        cache = DynamicCache(list(kv), config=self.model.config) if kv else DynamicCache(config=self.model.config)
        mask = torch.ones(1, len(prefix), dtype=torch.long, device=self.device)  # (1, Lp)
        hidden = self._backbone(ids, mask, positions, cache)  # (1, Lp - start, H)
        kv = [(layer.keys, layer.values) for layer in cache.layers]
        return kv, hidden[:, -1:]  # last hidden (1, 1, H) predicts the first continuation token

    # ------------------------------------------------------------------ generation

    @contextlib.contextmanager
    def prefix_cache(self):
        """Within this block, ``generate`` keeps each finished row's cache and a later prompt that extends a kept
        sequence encodes only its new tokens (multi-turn reuse, :mod:`mirl.policy.kv`). Use it for one rollout:
        the caches are dropped on exit, and must not outlive a weight update."""
        previous = self._store
        self._store = PrefixStore(self.prefix_cache_bytes) if self.prefix_sharing else None
        try:
            yield self._store
        finally:
            if self._keeping and self._store is not None:
                self._kept = self._kept or PrefixStore(self.prefix_cache_bytes)
                self._kept.merge(self._store)
            self._store = previous

    @contextlib.contextmanager
    def keep_rollout_caches(self):
        """Within this block the caches the rollouts' :meth:`prefix_cache` held at their end are kept, and
        :meth:`score` takes the keys and values of a prefix that a kept sequence starts with from them instead of
        encoding it again: the diagnostics right after a rollout score the very contexts it sampled from. Only for
        the weights that sampled (not with a sampler copy in another dtype, nor for a vision policy, whose
        positions follow its images), and only until a weight update: the caches are dropped when the block ends.
        Kept and fresh keys and values agree up to float rounding (another batch layout)."""
        if self.sampler_copy is not None or type(self)._position_shift is not HFPolicy._position_shift:
            yield
            return
        self._keeping = True
        try:
            yield
        finally:
            self._keeping, self._kept = False, None

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        """Sample one continuation per prompt (see the module docstring for the exact semantics), on the sampler
        copy when :meth:`sample_in` set another dtype."""
        if self.sampler_copy is None:
            return self._generate(prompts, sampling)
        trained, self.model = self.model, self.sampler_copy.model_for(self.model)
        try:
            return self._generate(prompts, sampling)
        finally:
            self.model = trained

    @torch.no_grad()
    def _generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        check_sampling(sampling)
        prompts = [[int(t) for t in p] for p in prompts]
        for i, prompt in enumerate(prompts):
            if not prompt:
                raise ValueError(f"prompts[{i}] is empty; generate needs at least one context token")
        if not prompts:
            return []
        limits = [self._reply_limit(i, len(p), sampling) for i, p in enumerate(prompts)]  # tokens per row at most
        rows = len(prompts)
        cache, hidden, mask, next_pos = self._prefill(prompts)  # cache of B rows, (B, H), (B, L), (B,)
        store = self._store if self._store is not None and reusable(cache) else None
        appendable(cache)  # decode steps write into spare room instead of copying the cache
        # seed None: one draw from the global generator, so the caller's seeding still decides the samples
        base_seed = int(torch.randint(0, 2**62, ())) if sampling.seed is None else int(sampling.seed)
        out_ids: list[list[int]] = [[] for _ in range(rows)]
        out_logp: list[list[float]] = [[] for _ in range(rows)]
        reasons: list[str | None] = [None] * rows
        active = torch.arange(rows, device=self.device)  # (A,) global row of each cache row
        for step in range(max(limits)):
            uniform = step_uniforms(base_seed, step, rows).to(self.device)  # (B,)
            tokens, logp = sample_tokens(self._head(hidden), uniform[active], sampling.temperature, sampling.top_p)
            out = (out_ids, out_logp, reasons, limits)
            keep = self._record(active.tolist(), tokens.tolist(), logp.tolist(), out, sampling)
            replies_finished(keep.count(False))
            if store is not None and not all(keep):
                finished = [a for a, kept in enumerate(keep) if not kept]
                for a, kv in zip(finished, rows_kv(cache, finished, mask), strict=True):
                    row = int(active[a])
                    store.add(tuple(prompts[row]) + tuple(out_ids[row][:-1]), kv)  # the last token was never fed
            if not any(keep):
                break
            keep_t = torch.tensor(keep, device=self.device)
            if not all(keep):
                cache.batch_select_indices(keep_t.nonzero().squeeze(-1))
            active, mask, next_pos, tokens = active[keep_t], mask[keep_t], next_pos[keep_t], tokens[keep_t]
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)  # (A, L + step)
            hidden = self._backbone(tokens[:, None], mask, next_pos[:, None], cache)[:, -1]  # (A, H)
            next_pos = next_pos + 1
        return [
            Generation(tuple(i), tuple(lp), reason or "length")
            for i, lp, reason in zip(out_ids, out_logp, reasons, strict=True)
        ]

    def _prefill(self, prompts: list[list[int]]):
        """Encode the prompts: (cache of B rows, last hidden (B, H), mask (B, L), next positions (B,)); see
        :func:`mirl.policy.hf_prefill.prefill`."""
        return prefill(self, prompts)

    def _joinable(self) -> bool:
        """Whether this model's cache rows can be cut out and joined (plain growing layers only)."""
        if self._plain_cache is None:
            self._plain_cache = reusable(DynamicCache(config=self.model.config))
        return self._plain_cache

    def _left_pad(self, prompts: list[list[int]]):
        longest = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), longest), self.pad_token_id, dtype=torch.long)  # (B, L)
        mask = torch.zeros(len(prompts), longest, dtype=torch.long)  # (B, L)
        for r, prompt in enumerate(prompts):
            ids[r, longest - len(prompt) :] = torch.tensor(prompt)
            mask[r, longest - len(prompt) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, L)
        return ids.to(self.device), mask.to(self.device), positions.to(self.device)

    def _reply_limit(self, index: int, prompt_len: int, sampling: SamplingParams) -> int:
        """New tokens row ``index`` may sample: min(max_new_tokens, max_total_tokens - L, max_positions - L)."""
        limit = sampling.max_new_tokens
        for total in (sampling.max_total_tokens, self.max_positions):
            if total is not None:
                limit = min(limit, total - prompt_len)
        if limit < 1:
            raise ValueError(
                f"prompts[{index}] has {prompt_len} tokens, leaving no room for a reply (sampling.max_total_tokens="
                f"{sampling.max_total_tokens}, model positions {self.max_positions}); shorten the prompt"
            )
        return limit

    def _record(self, rows, tokens, logps, out, sampling) -> list[bool]:
        """Append this step's tokens; set finish reasons; return, per active row, whether it continues."""
        out_ids, out_logp, reasons, limits = out
        keep = []
        for row, token, logp in zip(rows, tokens, logps, strict=True):
            out_ids[row].append(token)
            out_logp[row].append(logp)
            if token in self.stop_token_ids:
                reasons[row] = "eos"
            elif sampling.stop and ends_with_stop(self.tokenizer, out_ids[row], sampling.stop):
                reasons[row] = "stop"
            elif len(out_ids[row]) >= limits[row]:
                reasons[row] = "length"
            keep.append(reasons[row] is None)
        return keep
