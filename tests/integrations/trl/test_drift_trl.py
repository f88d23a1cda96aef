"""``mirl drift`` against TRL's own chat templates and TRL's logged completions (the fixture TRL wrote).

TRL ships Qwen3's template (``trl/chat_templates/qwen3.jinja``), which drops the ``<think>`` block of assistant
messages before the last user message, and a training template (``qwen3_training.jinja``) that keeps it; TRL's
``is_chat_template_prefix_preserving`` tells them apart on a tool call. The drift check must agree on a reasoning
conversation, with the tiny tokenizer carrying each template."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

trl = pytest.importorskip("trl", reason="TRL tests run in .venv-trl: bash scripts/test-trl.sh")

from trl.chat_template_utils import is_chat_template_prefix_preserving  # noqa: E402

from mirl.diagnostics.drift import template_partings  # noqa: E402
from mirl.policy.tiny import tiny_tokenizer  # noqa: E402

from ...diagnostics.test_drift import TWO_TURNS  # noqa: E402

FIXTURE = Path(__file__).parents[2] / "fixtures" / "diagnose" / "trl"


def with_template(name: str):
    tokenizer = copy.deepcopy(tiny_tokenizer())
    tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / f"{name}.jinja").read_text()
    return tokenizer


def test_qwen3_parts_after_the_reasoning_turn_and_trls_training_template_does_not():
    qwen3, training = with_template("qwen3"), with_template("qwen3_training")
    assert not is_chat_template_prefix_preserving(qwen3) and is_chat_template_prefix_preserving(training)
    steps, partings = template_partings(qwen3, TWO_TURNS)
    assert steps == 4 and [p.step for p in partings] == [3]  # messages 1..3 vs 1..4: the first reply's thinking
    assert "think" in partings[0].sampled and "think" not in partings[0].trained
    assert template_partings(training, TWO_TURNS) == (4, [])


@pytest.mark.parametrize("template", ["chatml", "qwen3"])
def test_drift_on_the_completions_trl_logged(tmp_path, capsys, template):
    from mirl.cli import main

    tokenizer = tiny_tokenizer() if template == "chatml" else with_template("qwen3")
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    out = tmp_path / "drift.json"
    assert main(["drift", str(FIXTURE), "--model", str(tmp_path / "tokenizer"), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    # 6 prompts x 2 completions, each system + user + one reply: steps 1..2 and 2..3 per conversation. The replies
    # hold no <think>, so even Qwen3's template keeps every prefix; the file holds text only, so no sampled-ids check
    assert (report["format"], report["conversations"], report["checked"]) == ("trl", 12, {"template": 24})
    assert (report["affected"], report["partings"]) == (0, 0)
    assert "no drift" in capsys.readouterr().out
