"""Cross-scoring for the MI diagnostics through a batch log-prob function (veRL: the actor's ``compute_log_prob``).

:func:`mirl.diagnostics.run.run_diagnostics` needs a policy with ``score(prefixes, continuations)``.
:class:`RowScorer` provides it on top of any ``logprob_fn(prompts, responses) -> per-token log-probs``, the shape of
veRL's actor worker-group call: every cell (prefix x_j, continuation z_i) becomes one row ``prompt = x_j``,
``response = z_i``, and the row's log-probs are log p(z_i,t | x_j, z_i,<t) at temperature 1. Rows go out in
chunks of at most ``max_rows``. Unlike ``HFPolicy.score`` no prefix is shared between rows (the actor re-encodes
each sequence, as the reference implementation does); the numbers are the same up to float rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

LogprobFn = Callable[[list[list[int]], list[list[int]]], list[torch.Tensor]]


class RowScorer:
    """A ``score``-only policy over a row log-prob function (module docstring)."""

    def __init__(self, tokenizer, logprob_fn: LogprobFn, *, max_rows: int = 256) -> None:
        if max_rows < 1:
            raise ValueError(f"max_rows must be >= 1, got {max_rows}")
        self.tokenizer = tokenizer
        self.logprob_fn = logprob_fn
        self.max_rows = max_rows
        self.rows_scored = 0

    def score(self, prefixes: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """Per-token log-probs of each continuation after its prefix: element i has shape (len(continuations[i]),)."""
        if len(prefixes) != len(continuations):
            raise ValueError(f"score needs one prefix per continuation, got {len(prefixes)} and {len(continuations)}")
        out: list[torch.Tensor] = [torch.zeros(0)] * len(prefixes)
        todo = [i for i, c in enumerate(continuations) if len(c) > 0]
        for begin in range(0, len(todo), self.max_rows):
            rows = todo[begin : begin + self.max_rows]
            scored = self.logprob_fn([list(prefixes[i]) for i in rows], [list(continuations[i]) for i in rows])
            if len(scored) != len(rows):
                raise ValueError(f"logprob_fn returned {len(scored)} rows for {len(rows)}")
            for i, logp in zip(rows, scored, strict=True):
                logp = torch.as_tensor(logp, dtype=torch.float32).reshape(-1)
                if logp.shape[0] != len(continuations[i]):
                    raise ValueError(
                        f"logprob_fn returned {logp.shape[0]} log-probs for a {len(continuations[i])}-token response"
                    )
                out[i] = logp
            self.rows_scored += len(rows)
        return out


def policy_logprob_fn(policy) -> LogprobFn:
    """A ``logprob_fn`` from a mirl ``HFPolicy``'s training forward (``token_logprobs``), one row at a time.

    For tests and CPU runs: the same computation the actor does, a full forward of prompt + response.
    """

    @torch.no_grad()
    def logprobs(prompts: list[list[int]], responses: list[list[int]]) -> list[torch.Tensor]:
        out = []
        for prompt, response in zip(prompts, responses, strict=True):
            ids = torch.tensor([prompt + response], dtype=torch.long)  # (1, T)
            logp, _ = policy.token_logprobs(ids, torch.ones_like(ids, dtype=torch.bool))
            out.append(logp[0, len(prompt) :].float())
        return out

    return logprobs
