"""Property: any text sent to any registered env's step returns a well-formed result and never raises."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from mirl.envs import make, registry

# near-misses of real actions mixed with arbitrary unicode, so episodes also advance and end
NEAR_MISSES = ["Up", " left ", "RIGHT", "down\n", "Left || Up", "Tortoise", "hare", "1 + 2", "42", "The answer is: 3"]
actions = st.one_of(st.text(max_size=60), st.sampled_from(NEAR_MISSES))


LOCAL_ENVS = sorted(set(registry) - {"openenv"})  # openenv needs a server: tests/remote


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(LOCAL_ENVS), seed=st.integers(0, 2**32 - 1), script=st.lists(actions, max_size=15))
def test_step_never_raises(name, seed, script):
    env = make(name)
    observation, _ = env.reset(seed=seed)
    for action in script:  # keeps stepping after the episode ends: those steps must be inert, not errors
        observation, reward, terminated, truncated, info = env.step(action)
        assert isinstance(observation, str) and observation == env.render()
        assert math.isfinite(reward) and type(terminated) is bool and type(truncated) is bool
        assert all(type(info[key]) is bool for key in ("success", "action_valid", "action_effective"))
