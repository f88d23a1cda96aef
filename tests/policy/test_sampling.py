import pytest
import torch

from mirl.policy import sampling
from mirl.policy.sampling import sample_tokens


def full_sort_sample(logits, uniform, temperature, top_p):
    """The definition: sort the whole vocabulary (ties by id), keep the nucleus, draw by inverse CDF."""
    logp = (logits / temperature).log_softmax(-1)
    values, ids = logp.sort(dim=-1, descending=True, stable=True)
    probs = values.exp()
    probs = probs * ((probs.cumsum(-1) - probs) < top_p)
    cdf = probs.cumsum(-1)
    index = torch.searchsorted(cdf, (uniform * cdf[:, -1]).unsqueeze(-1), right=True)
    return ids.gather(-1, index).squeeze(-1)


@pytest.mark.parametrize("scale", [8.0, 0.01])  # peaked: the nucleus lies in the top-k; flat: the fallback sort
@pytest.mark.parametrize("top_p", [0.5, 0.95])
def test_partial_top_k_draws_what_a_full_sort_draws(monkeypatch, scale, top_p):
    monkeypatch.setattr(sampling, "NUCLEUS_CANDIDATES", 64)
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(200, 4096, generator=generator) * scale  # (A, V)
    uniform = torch.rand(200, generator=generator)
    tokens, logp = sample_tokens(logits, uniform, 0.7, top_p)
    assert torch.equal(tokens, full_sort_sample(logits, uniform, 0.7, top_p))
    torch.testing.assert_close(logp, (logits / 0.7).log_softmax(-1).gather(-1, tokens[:, None]).squeeze(-1))


def test_ties_are_ordered_by_id_even_across_the_candidate_boundary(monkeypatch):
    monkeypatch.setattr(sampling, "NUCLEUS_CANDIDATES", 4)
    # eight equally likely tokens at the top: the top-4 cut falls inside the tie group, so the sampler must sort
    logits = torch.full((3, 50), -10.0)
    logits[:, 10:18] = 5.0
    uniform = torch.tensor([0.01, 0.5, 0.99])
    tokens, _ = sample_tokens(logits, uniform, 1.0, 0.9)
    assert torch.equal(tokens, full_sort_sample(logits, uniform, 1.0, 0.9))
    assert tokens.tolist() == [10, 14, 17]  # ascending ids share the mass evenly: u * 8 picks 0, 4 and 7
