"""What other frameworks write, read as text samples (``mirl diagnose --format``, ``docs/diagnose.md``).

Each format maps one record to a :class:`TextSample`: the prompt (raw text, or the messages before the first
reply), the completion (text, or the messages from the first reply on), the file's own group id when it has one,
the reward and the success flag. ``mirl.diagnostics.retokenise`` turns samples into episodes.

- ``chat``: ``{"messages": [...], "group"?, "reward"?, "success"?}`` (mirl's generic chat JSONL).
- ``ragen``: RAGEN's JSONL export (``ragen/llm_agent/agent_proxy.py`` with ``output.format=jsonl`` or
  ``output.save_jsonl_backup=true``): ``{"custom_id": "traj_<i>", "messages": [user, assistant, ...],
  "metadata": {"env_id", "group_id", "num_turns", "total_reward", "success"?, ...}}``. Groups: ``group_id``.
- ``verl``: veRL's rollout dump (``trainer.rollout_data_dir``; ``RayPPOTrainer._write_generations`` in veRL
  0.9.1 writes ``<step>.jsonl`` per training step): ``{"input", "output", "gts", "score", "step", ...}`` plus
  one key per reward extra info (and ``request_id``). ``input`` is the prompt ids decoded with
  ``skip_special_tokens=True``: the chat template was applied, but its special tokens (``<|im_start|>`` ...) are
  gone. It carries no uid: groups come from identical ``(step, input)``.
- ``trl``: TRL's ``GRPOTrainer`` completions (``log_completions=True``): ``<output_dir>/completions/
  completions_<step:05d>.parquet``, columns ``step``, ``prompt``, ``completion``, one per reward function,
  logged extras and ``advantage``. ``prompt`` and ``completion`` are text, or message lists for conversational
  datasets. No uid: groups come from identical ``(step, prompt)``. Rows are read like ``prompt-completion``.
- ``prompt-completion``: ``{"prompt": str | messages, "completion": str | messages, "group"? | "uid"?,
  "reward"?, "success"?}``.

Every check returns what is wrong with a record (``field 'output' must be a string, got 3``) or None; nothing is
evaluated, only compared.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

ROLES = ("system", "user", "assistant")
COMPLETION_ROLES = ("assistant", "tool")  # a multi-turn completion (TRL tools) holds tool results too


@dataclass(frozen=True)
class TextSample:
    """One trajectory as text: what the model was given and what it wrote."""

    prompt: str | tuple[dict, ...]  # raw prompt text, or the messages before the first reply
    completion: str | tuple[dict, ...]  # the generated text, or the messages from the first reply on
    group: Hashable | None  # the file's own group id; None: grouped by identical prompts
    step: int | None = None  # the training step, kept apart when a file holds several
    reward: float = 0.0
    success: bool = False


@dataclass(frozen=True)
class Format:
    """One input format: the keys that identify it, what it is, its record check and its sample."""

    name: str
    keys: tuple[str, ...]  # all present in the first record (files of this format always write them)
    described: str  # for messages: "veRL's rollout dump (trainer.rollout_data_dir)"
    check: Callable[[dict], str | None]
    sample: Callable[[dict], TextSample]
    caveat: str = ""  # what else the text lost, said with the diagnosis
    prefill: bool = False  # the writer's agent format pre-fills <think> in every assistant turn (mirl, RAGEN)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_finite(value: Any) -> bool:
    return _is_number(value) and math.isfinite(value)


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def short(value: Any) -> str:
    text = json.dumps(value, allow_nan=True, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def message_text(content: Any) -> str | None:
    """A message's text: a string, or a list of text blocks (``{"type": "text", "text": ...}``) joined; None for
    anything else (an image block: the logs hold no pixels to score)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str) for b in content
    ):
        return "".join(block["text"] for block in content)
    return None


def messages_problem(messages: Any, field: str, roles: tuple[str, ...] = (*ROLES, "tool")) -> str | None:
    if not isinstance(messages, list) or not messages:
        return f"field '{field}' must be a non-empty list of {{role, content}} objects, got {short(messages)}"
    for k, message in enumerate(messages):
        item = f"message {k}" if field == "messages" else f"{field}[{k}]"
        if not isinstance(message, dict) or message.get("role") not in roles:
            return f"{item}: expected {{'role': one of {list(roles)}, 'content': str}}, got {short(message)}"
        if message_text(message.get("content")) is None:
            return f"{item}: 'content' must be a string or a list of text blocks, got {short(message)}"
    return None


def _plain(messages: list[dict]) -> tuple[dict, ...]:
    return tuple({"role": m["role"], "content": message_text(m["content"])} for m in messages)


def _split(messages: list[dict]) -> tuple[tuple[dict, ...], tuple[dict, ...]]:
    """Messages before the first assistant message, and from it on."""
    plain = _plain(messages)
    first = next((i for i, m in enumerate(plain) if m["role"] == "assistant"), len(plain))
    return plain[:first], plain[first:]


def _optional_problem(record: dict, keys: tuple[str, ...] = ("group", "uid", "reward", "success")) -> str | None:
    for key in ("group", "uid"):
        if key in keys and key in record and not _is_scalar(record[key]):
            return f"field '{key}' must be a string, a number, true/false or null, got {short(record[key])}"
    if "reward" in keys and "reward" in record and not _is_finite(record["reward"]):
        return f"field 'reward' must be a finite number, got {short(record['reward'])}"
    if "success" in keys and "success" in record and not isinstance(record["success"], bool):
        return f"field 'success' must be true or false, got {short(record['success'])}"
    step = record.get("step")
    if step is not None and not (_is_finite(step) and step >= 0):  # int(inf) would fail after the model loads
        return f"field 'step' must be a finite number >= 0, got {short(step)}"
    return None


def _group_of(record: dict) -> Hashable | None:
    for key in ("group", "uid"):
        if record.get(key) is not None:
            return (key, record[key])
    return None


def _step_of(record: dict) -> int | None:
    return None if record.get("step") is None else int(record["step"])


# ---------------------------------------------------------------------------------------------------- chat


def check_chat(record: dict) -> str | None:
    problem = messages_problem(record.get("messages"), "messages", ROLES)
    if problem:
        return problem
    return _optional_problem(record, ("group", "reward", "success"))


def chat_sample(record: dict) -> TextSample:
    prompt, completion = _split(record["messages"])
    group = ("group", record["group"]) if "group" in record else None
    return TextSample(prompt, completion, group, None, float(record.get("reward", 0.0)), record.get("success", False))


# --------------------------------------------------------------------------------------------------- RAGEN


def check_ragen(record: dict) -> str | None:
    problem = messages_problem(record.get("messages"), "messages", ROLES)
    if problem:
        return problem
    metadata = record.get("metadata")
    if not isinstance(metadata, dict):
        return f"field 'metadata' must be an object, got {short(metadata)}"
    if not _is_scalar(metadata.get("group_id")) or metadata.get("group_id") is None:
        return f"field 'metadata.group_id' must be a number or a string, got {short(metadata.get('group_id'))}"
    if "total_reward" in metadata and not _is_finite(metadata["total_reward"]):
        return f"field 'metadata.total_reward' must be a finite number, got {short(metadata['total_reward'])}"
    if "success" in metadata and not isinstance(metadata["success"], bool | int | float):
        return f"field 'metadata.success' must be true or false, got {short(metadata['success'])}"
    return None


def ragen_sample(record: dict) -> TextSample:
    metadata = record["metadata"]
    prompt, completion = _split(record["messages"])
    reward, success = float(metadata.get("total_reward", 0.0)), bool(metadata.get("success", False))
    return TextSample(prompt, completion, ("group_id", metadata["group_id"]), None, reward, success)


# ---------------------------------------------------------------------------------------------------- veRL


def check_verl(record: dict) -> str | None:
    for key in ("input", "output"):
        if not isinstance(record.get(key), str):
            return f"field '{key}' must be a string, got {short(record.get(key))}"
    if "score" in record and not _is_finite(record["score"]):
        return f"field 'score' must be a finite number, got {short(record['score'])}"
    return _optional_problem(record, ("group", "uid"))


def verl_sample(record: dict) -> TextSample:
    reward = float(record.get("score", 0.0))
    return TextSample(record["input"], record["output"], _group_of(record), _step_of(record), reward)


# ---------------------------------------------------------------------------- prompt-completion (and TRL)


def check_prompt_completion(record: dict) -> str | None:
    prompt, completion = record.get("prompt"), record.get("completion")
    if isinstance(prompt, str) != isinstance(completion, str):
        return (
            "fields 'prompt' and 'completion' must both be strings or both be message lists, got "
            f"{short(prompt)} and {short(completion)}"
        )
    if not isinstance(prompt, str):
        problem = messages_problem(prompt, "prompt") or messages_problem(completion, "completion", COMPLETION_ROLES)
        if problem:
            return problem
    return _optional_problem(record)


def prompt_completion_sample(record: dict) -> TextSample:
    prompt, completion = record["prompt"], record["completion"]
    if not isinstance(prompt, str):
        prompt, completion = _plain(prompt), _plain(completion)
    reward, success = float(record.get("reward", 0.0)), record.get("success", False)
    return TextSample(prompt, completion, _group_of(record), _step_of(record), reward, success)


VERL_CAVEAT = "veRL writes prompts decoded without special tokens, so X lacks the chat template's role markers"
RAGEN_KEYS = ("custom_id", "messages", "metadata")
_PROMPT_COMPLETION = (("prompt", "completion"), check_prompt_completion, prompt_completion_sample)
FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("ragen", RAGEN_KEYS, "RAGEN's JSONL export", check_ragen, ragen_sample, prefill=True),
        Format("chat", ("messages",), "chat JSONL", check_chat, chat_sample, prefill=True),
        Format("verl", ("input", "output"), "veRL's rollout dump", check_verl, verl_sample, VERL_CAVEAT),
        Format("trl", _PROMPT_COMPLETION[0], "TRL's logged completions", *_PROMPT_COMPLETION[1:]),
        Format("prompt-completion", _PROMPT_COMPLETION[0], "prompt/completion JSONL", *_PROMPT_COMPLETION[1:]),
    )
}
# mirl's own episodes are read by mirl.rollout.io, not as text
CHOICES = ("auto", "mirl", *FORMATS)


def detect(first: dict) -> str | None:
    """The format of a JSONL file from its first record (``trl`` is the parquet format, told by its bytes).

    >>> detect({"input": "q", "output": "a", "score": 1.0, "step": 3}), detect({"messages": []})
    ('verl', 'chat')
    >>> detect({"custom_id": "traj_0", "messages": [], "metadata": {}}), detect({"prompt": "", "completion": ""})
    ('ragen', 'prompt-completion')
    """
    if "turns" in first:
        return "mirl"
    for name, fmt in FORMATS.items():
        if name != "trl" and all(key in first for key in fmt.keys):
            return name
    return None


def group_source(fmt: str, records: list[dict]) -> str:
    """Where the groups of a text file come from, in words.

    >>> group_source("verl", [{"input": "q"}]), group_source("chat", [{"group": 1}, {}])
    ('identical prompts', "the records' 'group' (identical prompts where it is absent)")
    """
    if fmt == "ragen":
        return "RAGEN's metadata.group_id"
    keys = [key for key in ("group", "uid") if any(record.get(key) is not None for record in records)]
    if not keys:
        return "identical prompts"
    named = " / ".join(f"'{key}'" for key in keys)
    return f"the records' {named} (identical prompts where it is absent)"


# ------------------------------------------------------------------------------------------- --fields mapping

FIELDS = ("prompt", "completion", "group", "reward", "success", "step")  # what a mapping may name
GUESSES = {  # common names in other frameworks' logs, for the suggestion when a file is not recognised
    "prompt": ("prompt", "query", "question", "input", "instruction", "problem", "context"),
    "completion": ("completion", "response", "output", "answer", "generation", "reply", "text"),
    "group": ("group", "uid", "prompt_id", "group_id", "question_id", "id"),
    "reward": ("reward", "score", "rewards", "return"),
}


def parse_fields(text: str) -> dict[str, str]:
    """``--fields prompt=query,completion=response,...`` -> ``{field: key}``, every field of :data:`FIELDS`
    present (those not named keep their own name); a ``ValueError`` says what is wrong.

    >>> parse_fields("prompt=query,completion=response")["completion"], parse_fields("group=prompt_id")["prompt"]
    ('response', 'prompt')
    """
    named: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        field, sep, key = (x.strip() for x in part.partition("="))
        if not sep or not key or field not in FIELDS:
            raise ValueError(
                f"--fields takes FIELD=KEY pairs with FIELD one of {', '.join(FIELDS)}, got {part!r}; e.g. "
                "--fields prompt=query,completion=response,group=prompt_id,reward=reward"
            )
        if field in named:
            raise ValueError(f"--fields names {field!r} twice")
        named[field] = key
    return {field: named.get(field, field) for field in FIELDS}


def map_fields(record: dict, fields: dict[str, str]) -> dict:
    """``record`` as a prompt/completion record under ``fields`` (:func:`parse_fields`). A key that is not in the
    record may be a dotted path into it (``metadata.group_id``); text cells (CSV) of ``reward`` and ``step``
    become numbers and of ``success`` true/false where they read as such (else the record check names them)."""
    out = {}
    for field, key in fields.items():
        value = lookup(record, key)
        if value is MISSING:
            continue
        if isinstance(value, str) and field in ("reward", "step"):
            value = _number(value)
        elif isinstance(value, str) and field == "success":
            value = {"true": True, "1": True, "false": False, "0": False}.get(value.strip().lower(), value)
        if field == "group" and isinstance(value, list | dict):
            value = json.dumps(value, sort_keys=True)  # a compound id still names one prompt
        out[field] = value
    return out


MISSING = object()


def lookup(record: dict, key: str):
    if key in record:
        return record[key]
    value = record
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return MISSING
        value = value[part]
    return value


def _number(text: str):
    try:
        return float(text) if any(c in text for c in ".eEnN") else int(text)
    except ValueError:
        return text


def suggest_fields(first: dict) -> str:
    """A ``--fields`` value for a record of unknown keys, guessed from common names.

    >>> suggest_fields({"query": "q", "response": "r", "prompt_id": 3, "reward": 1.0})
    '--fields prompt=query,completion=response,group=prompt_id,reward=reward'
    >>> suggest_fields({"a": 1})
    '--fields prompt=KEY,completion=KEY'
    """
    lowered = {str(key).lower(): str(key) for key in first}
    pairs = []
    for field, names in GUESSES.items():
        found = next((lowered[name] for name in names if name in lowered), None)
        if found is not None or field in ("prompt", "completion"):
            pairs.append(f"{field}={found or 'KEY'}")
    return "--fields " + ",".join(pairs)
