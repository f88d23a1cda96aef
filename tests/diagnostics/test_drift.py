"""Retokenisation drift (``mirl.diagnostics.drift``, ``mirl drift``) with tiny in-process tokenizers: ChatML, which
keeps every message as written, and a template that drops the ``<think>`` block of assistant messages before the
last user message, as Qwen3's does."""

from __future__ import annotations

import copy
import json

import pytest

from mirl.diagnostics.drift import boundary_parting, drift_report, first_difference, render_ids, template_partings
from mirl.policy.tiny import tiny_tokenizer

# assistant messages before the last user message lose "<think>...</think>" (written here, in the manner of Qwen3's)
STRIPPING = (
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for m in messages %}{% if m['role'] == 'user' %}{% set ns.last_user = loop.index0 %}{% endif %}{% endfor -%}"
    "{%- for m in messages -%}"
    "{%- set content = m['content'] -%}"
    "{%- if m['role'] == 'assistant' and loop.index0 < ns.last_user and '</think>' in content -%}"
    "{%- set content = content.split('</think>')[-1].lstrip() -%}"
    "{%- endif -%}"
    "<|im_start|>{{ m['role'] }}\n{{ content }}<|im_end|>\n"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif -%}"
)
TWO_TURNS = [
    {"role": "system", "content": "Reach G."},
    {"role": "user", "content": "State: P_G"},
    {"role": "assistant", "content": "<think>G is right.</think><answer>Right</answer>"},
    {"role": "user", "content": "State: _PG"},
    {"role": "assistant", "content": "<think>Again.</think><answer>Right</answer>"},
]


def stripping_tokenizer():
    tokenizer = copy.deepcopy(tiny_tokenizer())
    tokenizer.chat_template = STRIPPING
    return tokenizer


def test_chatml_keeps_every_prefix():
    steps, partings = template_partings(tiny_tokenizer(), TWO_TURNS)
    assert (steps, partings) == (4, [])


def test_a_template_that_strips_earlier_thinking_parts_after_the_assistant_turn():
    tokenizer = stripping_tokenizer()
    steps, partings = template_partings(tokenizer, TWO_TURNS, conversation=7)
    assert steps == 4 and len(partings) == 1
    (parting,) = partings
    # messages 1..3 end with the first reply, thinking included; 1..4 re-render it without: they part inside the
    # reply, after "<|im_start|>assistant\n" and the "<" that "<think>" and "<answer>" share
    assert (parting.conversation, parting.check, parting.step) == (7, "template", 3)
    sampled = render_ids(tokenizer, TWO_TURNS[:3], False)
    head = tokenizer.apply_chat_template(TWO_TURNS[:2], tokenize=False, add_generation_prompt=True)
    assert tokenizer.decode(sampled[: parting.token]) == head + "<"
    assert "1..3 vs 1..4 (message 3 is the assistant's)" in parting.where
    assert "think" in parting.sampled and "think" not in parting.trained


def test_first_difference_and_the_text_boundary():
    assert first_difference([], [1]) is None and first_difference([5], []) == 0
    tokenizer = tiny_tokenizer()
    # "Down" alone, then "Down" + "wn": the join re-merges, so the prompt's tokens are not a prefix
    joined = [prompt for prompt in ("Do", "<thi", "Ri") if boundary_parting(tokenizer, prompt, "wn k>ght") is not None]
    assert joined, "no prompt of these re-merged at the join"
    assert boundary_parting(tokenizer, "State:\n", "<think>") is None  # a newline before a tag stays split


def test_sampled_ids_that_do_not_re_encode_are_found():
    tokenizer = tiny_tokenizer()
    text = "<think>go</think><answer>Down</answer>"
    canonical = tokenizer.encode(text, add_special_tokens=False)
    # the same text as single-byte tokens: what a sampler may draw, what a re-encoding never gives back
    bytewise = [tokenizer.convert_tokens_to_ids(t) for t in tokenizer.convert_ids_to_tokens(canonical) for t in t]
    bytewise = [i for i in bytewise if i is not None and i != tokenizer.unk_token_id]
    assert tokenizer.decode(bytewise) == text and bytewise != canonical
    record = {"turns": [{"context_ids": [1, 2], "response_ids": canonical}, {"context_ids": [1, 2, *canonical, 9],
              "response_ids": bytewise}]}  # fmt: skip
    report = drift_report("mirl", [record], tokenizer)
    assert report["checked"] == {"sampled": 2} and report["affected"] == 1 and report["partings"] == 1
    # turn 2's reply parts at token 1: "<" is one token both ways, then "t" against the merged "think>" piece
    assert tokenizer.convert_ids_to_tokens(canonical[:1]) == ["<"] and len(tokenizer.decode(canonical[1:2])) > 1
    assert report["first_partings"][0]["step"] == 1 and report["first_partings"][0]["token"] == 1
    broken = {"turns": [dict(record["turns"][0]), {"context_ids": [1, 3], "response_ids": canonical}]}
    parted = drift_report("mirl", [broken], tokenizer)["first_partings"]
    assert [(p["step"], p["token"]) for p in parted] == [(0, 1)]  # turn 2's context drops token 2


def test_cli_on_chat_files(tmp_path, capsys):
    from mirl.cli import main

    model = tmp_path / "stripping"
    stripping_tokenizer().save_pretrained(model)
    chatml = tmp_path / "chatml"
    tiny_tokenizer().save_pretrained(chatml)
    rollouts = tmp_path / "chat.jsonl"
    rollouts.write_text("\n".join(json.dumps({"messages": TWO_TURNS[: 3 + 2 * i]}) for i in range(2)) + "\n")
    out = tmp_path / "drift.json"
    assert main(["drift", str(rollouts), "--model", str(model), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert (report["conversations"], report["affected"], report["partings"]) == (2, 1, 1)
    assert report["checked"] == {"template": 2 + 4} and report["by_step"] == {"template 3": 1}
    printed = capsys.readouterr().out
    assert "1 of 2 conversations part" in printed and "conversation 1: messages 1..3 vs 1..4" in printed
    assert main(["drift", str(rollouts), "--model", str(chatml)]) == 0
    assert "no drift" in capsys.readouterr().out


def test_cli_errors_are_one_line(tmp_path, capsys):
    from mirl.cli import main

    assert main(["drift", str(tmp_path / "missing.jsonl"), "--model", "x"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.parametrize("path", ["tests/fixtures/diagnose/verl/1.jsonl"])
def test_text_files_get_the_boundary_check(path):
    from mirl.diagnostics.records import load_records

    fmt, records = load_records(path)
    report = drift_report(fmt, records, tiny_tokenizer())
    assert report["checked"] == {"boundary": len(records)}


def test_doctests():
    import doctest

    from mirl.diagnostics import drift

    assert doctest.testmod(drift).failed == 0
