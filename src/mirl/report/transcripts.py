"""Saved episodes rendered as readable transcripts, reasoning and actions highlighted.

Only the text fields of an episode are used (``observation``, ``response_text``, ``actions``, ``reward``,
validity flags), and a turn's stored images (``images``: ids read through :class:`mirl.report.images.RunImages`),
drawn beside its observation; token ids are ignored. Model text is untrusted: every fragment is HTML-escaped *after* the
``<think>`` / ``<answer>`` tags have been located in the raw text, so a reply holding ``<script>`` or a broken
tag shows up as literal text. Long fields are cut at ``MAX_CHARS`` with a note saying how much was cut.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from mirl.report.html import esc
from mirl.report.images import RunImages

MAX_CHARS = 3000
TAGGED = re.compile(r"<(think|answer)>(.*?)(?:</\1>|\Z)", re.DOTALL)


def clip(text: str, limit: int = MAX_CHARS) -> str:
    """``text`` cut to ``limit`` characters with a note of what was cut.

    >>> clip("abcdef", 4)
    'abcd ... [2 more characters]'
    """
    return text if len(text) <= limit else f"{text[:limit]} ... [{len(text) - limit} more characters]"


def response_html(text: str) -> str:
    """A reply with its ``<think>`` part as reasoning and its ``<answer>`` part as the action, escaped.

    >>> print(response_html("<think>go <b></think><answer>Left</answer>").replace("<div", "\\n<div"))
    <BLANKLINE>
    <div class="label">reasoning</div><pre class="think">go &lt;b&gt;</pre>
    <div class="label">answer</div><pre class="answer">Left</pre>
    """
    parts, position = [], 0
    for match in TAGGED.finditer(text):
        outside = text[position : match.start()].strip()
        if outside:
            parts.append(f'<div class="label">outside tags</div><pre>{esc(clip(outside))}</pre>')
        kind = "reasoning" if match.group(1) == "think" else "answer"
        css = "think" if match.group(1) == "think" else "answer"
        parts.append(f'<div class="label">{kind}</div><pre class="{css}">{esc(clip(match.group(2).strip()))}</pre>')
        position = match.end()
    rest = text[position:].strip()
    if rest or not parts:
        label = "reply (no tags found)" if not parts else "outside tags"
        parts.append(f'<div class="label">{label}</div><pre>{esc(clip(rest))}</pre>')
    return "".join(parts)


def _flag(value: Any, name: str) -> str:
    if value is None:
        return ""
    return f'<span class="{"ok" if value else "bad"}">{esc(name)}: {"yes" if value else "no"}</span>'


def turn_html(index: int, turn: dict[str, Any], images: RunImages | None = None) -> str:
    actions = turn.get("actions") or []
    action_text = " || ".join(str(a) for a in actions) if isinstance(actions, list) else str(actions)
    facts = [
        f"reward {esc(turn.get('reward', '?'))}",
        _flag(turn.get("format_valid"), "format valid"),
        _flag(turn.get("actions_valid"), "actions valid"),
        f"finish: {esc(turn.get('finish_reason', '?'))}",
    ]
    observation = f"<pre>{esc(clip(str(turn.get('observation') or '')))}</pre>"
    boards = images.turn_html(turn) if images is not None else ""
    if boards:
        observation = f'<div class="obs">{observation}{boards}</div>'
    return (
        f'<div class="turn"><strong>turn {index + 1}</strong> · {" · ".join(f for f in facts if f)}'
        f'<div class="label">observation</div>{observation}'
        f"{response_html(str(turn.get('response_text') or ''))}"
        f'<div class="label">parsed actions</div><pre class="answer">{esc(action_text or "(none)")}</pre></div>'
    )


def episode_html(episode: dict[str, Any], images: RunImages | None = None) -> str:
    """One episode: a heading with its identity and outcome, then every turn (with its boards, given ``images``)."""
    success = episode.get("success")
    outcome = '<span class="ok">success</span>' if success else '<span class="bad">failure</span>'
    heading = (
        f"{esc(episode.get('env', '?'))} seed {esc(episode.get('seed', '?'))} · group {esc(episode.get('group', '?'))}"
        f" sample {esc(episode.get('sample', '?'))} · {outcome} · return {esc(episode.get('return', '?'))}"
        f" · ended: {esc(episode.get('end_reason', '?'))}"
    )
    turns = episode.get("turns") if isinstance(episode.get("turns"), list) else []
    body = "".join(turn_html(i, t, images) for i, t in enumerate(turns) if isinstance(t, dict))
    return f'<div class="episode"><h4>{heading}</h4>{body or "<p>(no turns saved)</p>"}</div>'


def pick_episodes(episodes: Sequence[dict[str, Any]], count: int = 2) -> list[dict[str, Any]]:
    """Up to ``count`` episodes: the first success and the first failure when both exist, then in order.

    >>> [e["n"] for e in pick_episodes([{"n": 0, "success": 0}, {"n": 1, "success": 0}, {"n": 2, "success": 1}])]
    [2, 0]
    """
    successes = [e for e in episodes if e.get("success")]
    failures = [e for e in episodes if not e.get("success")]
    chosen = [group[0] for group in (successes, failures) if group][:count]
    chosen += [e for e in episodes if all(e is not c for c in chosen)][: count - len(chosen)]
    return chosen
