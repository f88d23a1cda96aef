"""The transformers backend of :class:`~mirl.policy.base.Policy`: sampling, scoring and training log-probs.

Everything is token ids in, token ids out. Generation is a batched sampling loop written here rather than
``model.generate``, because the rollout needs the exact log-prob of every sampled token, stop strings checked on
the decoded tail, and a seeded local generator:

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

Logits are ``lm_head(last_hidden_state)`` (with Gemma-2 style final soft-capping when the config sets it), computed
in chunks of positions so the (rows, positions, V) tensor never exceeds ``max_logit_elements``. With gradient
enabled each chunk is checkpointed, so the backward pass also keeps only one chunk of logits alive.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from transformers import DynamicCache

from mirl.policy.sources import load_model_and_tokenizer, resolve_device, resolve_dtype
from mirl.types import Generation, SamplingParams


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

    def eval(self) -> HFPolicy:
        self.model.eval()
        return self

    def train(self, mode: bool = True) -> HFPolicy:
        self.model.train(mode)
        return self

    # ------------------------------------------------------------------ model pieces

    def _backbone(self, input_ids, attention_mask, position_ids, cache=None) -> torch.Tensor:
        """Final hidden states (B, T, H) of the decoder, extending ``cache`` in place when given."""
        out = self.model.get_decoder()(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=cache is not None,
        )
        return out.last_hidden_state

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits in float32 from final hidden states (..., H) -> (..., V)."""
        logits = self.model.get_output_embeddings()(hidden).float()
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        return torch.tanh(logits / cap) * cap if cap else logits

    def _chunk_logprobs(self, hidden: torch.Tensor, targets: torch.Tensor, with_entropy: bool, temperature: float):
        logits = self._head(hidden)  # (B, C, V)
        if temperature != 1.0:
            logits = logits / temperature  # the distribution the rollout sampled from
        log_z = logits.logsumexp(-1)  # (B, C)
        logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - log_z  # (B, C)
        if not with_entropy:
            return (logp,)
        # H = -sum_v p_v log p_v = log Z - sum_v p_v * logit_v
        entropy = log_z - (logits.softmax(-1) * logits).sum(-1)  # (B, C)
        return logp, entropy

    def _logprobs_from_hidden(self, hidden, targets, *, with_entropy=False, chunk=None, temperature=1.0):
        """log p(targets[:, t]) under ``logits(hidden[:, t]) / temperature``, chunked over t; (B, T) each."""
        rows, length = targets.shape
        vocab = self.model.get_output_embeddings().weight.shape[0]
        chunk = chunk or max(1, self.max_logit_elements // max(1, rows * vocab))
        pieces = []
        for start in range(0, length, chunk):
            args = (hidden[:, start : start + chunk], targets[:, start : start + chunk], with_entropy, temperature)
            if torch.is_grad_enabled() and hidden.requires_grad:
                pieces.append(checkpoint(self._chunk_logprobs, *args, use_reentrant=False))
            else:
                pieces.append(self._chunk_logprobs(*args))
        logp = torch.cat([piece[0] for piece in pieces], dim=1)  # (B, T)
        entropy = torch.cat([piece[1] for piece in pieces], dim=1) if with_entropy else None
        return logp, entropy

    # ------------------------------------------------------------------ training log-probs

    def token_logprobs(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        *,
        with_entropy: bool = False,
        chunk: int | None = None,
        temperature: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per-token log-probs (and entropies) of a padded batch, with gradient.

        ``logp[:, t] = log p_T(ids[t] | ids[<t])`` and ``entropy[:, t] = H(p_T(. | ids[<t]))`` with
        ``p_T = softmax(logits / temperature)``: pass the rollout's sampling temperature so the policy being
        optimised is the one that sampled (the PPO ratio at the first update is then exactly 1). Column 0,
        positions where ``attention_mask`` is False and a left-padded row's first real token have no context and
        hold 0. Positions are ``cumsum(mask) - 1``, so left and right padding both work. ``chunk`` = positions per
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
        input_ids = input_ids.to(self.device)
        mask = attention_mask.to(self.device).bool()  # (B, T)
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)  # (B, T)
        hidden = self._backbone(input_ids, mask.long(), positions)  # (B, T, H)
        logp, entropy = self._logprobs_from_hidden(
            hidden[:, :-1], input_ids[:, 1:], with_entropy=with_entropy, chunk=chunk, temperature=float(temperature)
        )
        # a token counts when it and its predecessor are real: column 0 and a left-padded row's first token do not
        counted = mask & F.pad(mask[:, :-1], (1, 0), value=False)  # (B, T)
        logp = F.pad(logp, (1, 0)).masked_fill(~counted, 0.0)  # (B, T)
        if entropy is not None:
            entropy = F.pad(entropy, (1, 0)).masked_fill(~counted, 0.0)  # (B, T)
        return logp, entropy

    # ------------------------------------------------------------------ scoring

    @torch.no_grad()
    def score(self, prefixes: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """Teacher-forced log p(continuations[i][t] | prefixes[i], continuations[i][:t]), float32 on CPU.

        Identical prefixes (same id tuple) are encoded once; their KV cache is expanded over micro-batches of the
        continuations that follow them (right-padded, longest first, at most ``max_batch_tokens`` per pass).
        """
        if len(prefixes) != len(continuations):
            raise ValueError(f"score needs one prefix per continuation, got {len(prefixes)} and {len(continuations)}")
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, prefix in enumerate(prefixes):
            if len(prefix) == 0:
                raise ValueError(f"prefixes[{i}] is empty; score needs at least one context token")
            groups.setdefault(tuple(int(t) for t in prefix), []).append(i)
        results: list[torch.Tensor] = [torch.zeros(0)] * len(prefixes)
        for prefix, rows in groups.items():
            kv, last_hidden = self._encode_prefix(prefix)
            rows = sorted((i for i in rows if len(continuations[i]) > 0), key=lambda i: -len(continuations[i]))
            for batch in self._micro_batches(rows, continuations, len(prefix)):
                conts = [continuations[i] for i in batch]
                for i, logp in zip(batch, self._score_batch(kv, last_hidden, conts), strict=True):
                    results[i] = logp
        return results

    def _encode_prefix(self, prefix: tuple[int, ...]):
        ids = torch.tensor([prefix], device=self.device)  # (1, Lp)
        positions = torch.arange(len(prefix), device=self.device).unsqueeze(0)  # (1, Lp)
        cache = DynamicCache(config=self.model.config)
        hidden = self._backbone(ids, torch.ones_like(ids), positions, cache)  # (1, Lp, H)
        kv = [(layer.keys, layer.values) for layer in cache.layers]
        return kv, hidden[:, -1:]  # last hidden (1, 1, H) predicts the first continuation token

    def _micro_batches(self, rows: list[int], continuations, prefix_len: int):
        """Split rows (longest continuation first) so rows * (prefix_len + longest) <= max_batch_tokens."""
        batch: list[int] = []
        for i in rows:
            longest = len(continuations[batch[0]]) if batch else len(continuations[i])
            if batch and (len(batch) + 1) * (prefix_len + longest) > self.max_batch_tokens:
                yield batch
                batch = []
            batch.append(i)
        if batch:
            yield batch

    def _score_batch(self, kv, last_hidden, conts) -> list[torch.Tensor]:
        rows, longest, prefix_len = len(conts), max(len(c) for c in conts), kv[0][0].shape[-2]
        ids = torch.full((rows, longest), self.pad_token_id, device=self.device)  # (n, Lc) right-padded
        cont_mask = torch.zeros(rows, longest, dtype=torch.long, device=self.device)  # (n, Lc)
        for r, cont in enumerate(conts):
            ids[r, : len(cont)] = torch.tensor(cont, device=self.device)
            cont_mask[r, : len(cont)] = 1
        mask = torch.cat([torch.ones(rows, prefix_len, dtype=torch.long, device=self.device), cont_mask], 1)
        positions = (prefix_len + torch.arange(longest, device=self.device)).expand(rows, -1)  # (n, Lc)
        cache = DynamicCache(
            [(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1)) for k, v in kv],
            config=self.model.config,
        )
        hidden = self._backbone(ids, mask, positions, cache)  # (n, Lc, H)
        predictors = torch.cat([last_hidden.expand(rows, -1, -1), hidden[:, :-1]], dim=1)  # (n, Lc, H)
        logp, _ = self._logprobs_from_hidden(predictors, ids)  # (n, Lc)
        return [logp[r, : len(cont)].float().cpu() for r, cont in enumerate(conts)]

    # ------------------------------------------------------------------ generation

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        """Sample one continuation per prompt (see the module docstring for the exact semantics)."""
        check_sampling(sampling)
        prompts = [[int(t) for t in p] for p in prompts]
        for i, prompt in enumerate(prompts):
            if not prompt:
                raise ValueError(f"prompts[{i}] is empty; generate needs at least one context token")
        if not prompts:
            return []
        limits = [self._reply_limit(i, len(p), sampling) for i, p in enumerate(prompts)]  # tokens per row at most
        rows = len(prompts)
        ids, mask, positions = self._left_pad(prompts)  # (B, L) each
        cache = DynamicCache(config=self.model.config)
        hidden = self._backbone(ids, mask, positions, cache)[:, -1]  # (B, H)
        next_pos = positions[:, -1] + 1  # (B,)
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


def check_sampling(sampling: SamplingParams) -> None:
    if sampling.max_new_tokens < 1:
        raise ValueError(f"sampling.max_new_tokens must be >= 1, got {sampling.max_new_tokens}")
    if sampling.temperature < 0:
        raise ValueError(f"sampling.temperature must be >= 0 (0 = greedy), got {sampling.temperature}")
    if not 0.0 < sampling.top_p <= 1.0:
        raise ValueError(f"sampling.top_p must be in (0, 1], got {sampling.top_p}")
    if any(not stop for stop in sampling.stop):
        raise ValueError(f"sampling.stop must hold non-empty strings, got {sampling.stop!r}")


def step_uniforms(seed: int, step: int, rows: int) -> torch.Tensor:
    """The (rows,) uniforms of one decoding step from a CPU generator seeded with ``seed * 1000003 + step``.

    CPU ``torch.rand`` fills in order, so row r's value depends on (seed, step, r) only: never on how many rows
    the batch has or which of them already finished, and it is the same on every device.
    """
    generator = torch.Generator().manual_seed((seed * 1_000_003 + step) % 2**63)
    return torch.rand(rows, generator=generator)


def sample_tokens(logits: torch.Tensor, uniform: torch.Tensor, temperature: float, top_p: float):
    """Pick one token per row by inverse CDF of ``uniform`` (A,); return tokens (A,) and their log-probs (A,).

    The log-prob is under ``log_softmax(logits / temperature)``, before top-p truncation. Top-p keeps the most
    likely tokens whose preceding cumulative mass is below ``top_p`` (the first token always survives).

    >>> logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    >>> sample_tokens(logits, torch.tensor([0.6]), 1.0, 1.0)[0].item()  # cdf 0.5, 0.8, 1.0: 0.6 falls in token 1
    1
    >>> sample_tokens(logits, torch.tensor([0.6]), 1.0, 0.5)[0].item()  # top-p 0.5 keeps token 0 only
    0
    """
    if temperature == 0:
        logp_all = logits.log_softmax(-1)  # (A, V)
        tokens = logp_all.argmax(-1)  # (A,)
        return tokens, logp_all.gather(-1, tokens[:, None]).squeeze(-1)
    logp_all = (logits / temperature).log_softmax(-1)  # (A, V)
    probs = logp_all.exp()  # (A, V)
    order = None
    if top_p < 1.0:
        probs, order = probs.sort(-1, descending=True)  # (A, V)
        probs = probs * ((probs.cumsum(-1) - probs) < top_p)
    cdf = probs.cumsum(-1)  # (A, V)
    index = torch.searchsorted(cdf, (uniform * cdf[:, -1]).unsqueeze(-1), right=True)  # (A, 1)
    index = index.clamp(max=probs.shape[-1] - 1)
    tokens = (order.gather(-1, index) if order is not None else index).squeeze(-1)  # (A,)
    return tokens, logp_all.gather(-1, tokens[:, None]).squeeze(-1)


def ends_with_stop(tokenizer, ids: Sequence[int], stops: Sequence[str]) -> bool:
    """Whether a stop string occurs in the decoded tail of ``ids`` (checked after every new token).

    A stop string of b bytes completed by the last token starts within the last b tokens (every token decodes to
    at least one byte), so decoding the last ``b + 3`` tokens suffices; the 3 spare tokens cover a multi-byte
    character split across tokens and decoders that drop the first token's leading space.
    """
    window = max(len(stop.encode()) for stop in stops) + 3
    tail = tokenizer.decode(list(ids[-window:]), skip_special_tokens=False)
    return any(stop in tail for stop in stops)


def end_of_turn_ids(tokenizer, model=None) -> set[int]:
    """``tokenizer.eos_token_id``, the model's generation-config eos ids, and the chat template's end-of-turn token.

    The end-of-turn token is the first token after the assistant message in a rendered one-turn chat when that
    token is special (``<|im_end|>`` in ChatML, ``<|eot_id|>`` in Llama 3, ``<end_of_turn>`` in Gemma).
    """
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if config_eos is not None:
        ids.update(int(i) for i in ([config_eos] if isinstance(config_eos, int) else config_eos))
    if getattr(tokenizer, "chat_template", None):
        marker = "mirl-reply-marker"
        chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": marker}]
        try:
            rendered = tokenizer.apply_chat_template(chat, tokenize=False)
        except Exception:  # a template that rejects this chat says nothing about its end-of-turn token
            return ids
        tail = rendered.split(marker, 1)[-1] if marker in rendered else ""
        first = tokenizer.encode(tail, add_special_tokens=False)[:1]
        if first and first[0] in set(tokenizer.all_special_ids) | set(tokenizer.added_tokens_decoder):
            ids.add(int(first[0]))
    return ids
