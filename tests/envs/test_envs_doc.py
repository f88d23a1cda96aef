"""docs/envs.md stays in step with the registry: every env, every option and its default."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirl.envs import env_options, registry

DOC = Path(__file__).resolve().parents[2] / "docs" / "envs.md"


@pytest.mark.parametrize("name", sorted(registry))
def test_every_env_and_option_is_documented(name):
    text = DOC.read_text(encoding="utf-8")
    section = text.split(f"### `{name}` (", 1)
    assert len(section) == 2, f"docs/envs.md has no section for {name}; add it (mirl envs {name} lists the options)"
    body = section[1].split("\n### ", 1)[0]
    assert registry[name].description in body
    for option, (default, _) in env_options(name).items():
        assert f"| `{option}` | `{default!r}` |" in body, f"{name}.{option}={default!r} missing from docs/envs.md"
