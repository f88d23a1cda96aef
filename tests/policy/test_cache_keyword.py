"""The KV cache goes to the decoder under the name the installed transformers uses, so no call warns."""

import warnings

from mirl.policy.tiny import tiny_policy
from mirl.types import SamplingParams


def test_generation_and_scoring_raise_no_warning():
    """transformers >= 5.2x renamed ``past_key_values`` to ``cache`` and warns on every call with the old name:
    generation (prefill, decode, a later turn extending the cache) and prefix-shared scoring warn nothing."""
    policy = tiny_policy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = policy.generate([[5, 6, 7], [5, 6, 8]], SamplingParams(max_new_tokens=4, stop=(), seed=1))
        prompt = [5, 6, 7, *first[0].token_ids, 9]
        policy.generate([prompt], SamplingParams(max_new_tokens=3, stop=(), seed=2))
        scores = policy.score([[5, 6, 7], [5, 6, 7, 8]], [[9, 10], [11]])
    assert [s.shape[0] for s in scores] == [2, 1]


def test_the_keyword_follows_the_decoder_signature():
    from mirl.policy.hf import cache_keyword

    class Old:
        def forward(self, input_ids=None, past_key_values=None, use_cache=None): ...

    class New:
        def forward(self, input_ids=None, cache=None, use_cache=None): ...

    assert (cache_keyword(Old), cache_keyword(New)) == ("past_key_values", "cache")
