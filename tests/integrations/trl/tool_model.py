"""A tiny model that acts through :class:`MirlEnvironment`'s ``act`` tool, for TRL's ``environment_factory`` tests.

A random tiny model never writes a tool call, so TRL's tool loop would never step an env. Here the tiny Llama is
taught, by a few dozen supervised steps on whole conversations, to answer each state with
``<tool_call>{"name": "act", "arguments": {"answer": A}}</tool_call>`` for A among :data:`ANSWERS` and to reply
``Done.`` once the tool says the episode is over. The conversations are played on the real envs through
:class:`MirlEnvironment` and rendered as TRL renders them: the tiny tokenizer carrying TRL's copy of Qwen3's chat
template, whose tool calls TRL knows how to parse, and the training template TRL swaps in because Qwen3's is not
prefix-preserving. Sampling at temperature 1 then draws different answers across a group: reward spread.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import torch

from mirl.integrations.trl.environment import MirlEnvironment
from mirl.policy.tiny import tiny_model, tiny_tokenizer

ANSWERS = ("Down", "Right", "Jump")  # "Jump" is no FrozenLake action: a bad turn, format penalty


def tool_tokenizer():
    """The tiny tokenizer with TRL's copy of Qwen3's chat template (tool calls in ``<tool_call>`` tags)."""
    import trl

    tokenizer = copy.deepcopy(tiny_tokenizer())
    tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja").read_text()
    return tokenizer


def call(answer: str) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "act", "arguments": {"answer": answer}}}
    ]}  # fmt: skip


def conversation(factory, row: dict, answers) -> list[dict]:
    """The messages of one episode of ``row`` played with ``answers`` (until the env says it is over), then Done."""
    environment = factory()
    first = environment.reset(**{k: v for k, v in row.items() if k != "prompt"})
    messages = [row["prompt"][0], {"role": "user", "content": first}]
    for answer in answers:
        messages += [call(answer), {"role": "tool", "name": "act", "content": environment.act(answer)}]
        if environment.end_reason is not None:
            break
    return [*messages, {"role": "assistant", "content": "Done."}]


def pairs(tokenizer, messages: list[dict], tools) -> list[tuple[list[int], list[int]]]:
    """``(context ids, reply ids)`` of every assistant message, rendered with the template TRL trains with."""
    from trl.chat_template_utils import get_training_chat_template

    template = get_training_chat_template(tokenizer)

    def ids(part, generation):
        return tokenizer.apply_chat_template(
            part, tools=tools, chat_template=template, add_generation_prompt=generation, tokenize=True,
            return_dict=False,
        )  # fmt: skip

    out = []
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            context, full = ids(messages[:i], True), ids(messages[: i + 1], False)
            out.append((list(context), list(full[len(context) :])))
    return out


def teach(data, factory, *, steps: int = 30, seed: int = 0) -> torch.nn.Module:
    """The tiny model after ``steps`` Adam steps on the first reply of each row of ``data``, one example per answer
    (later turns are left to the model: the same ``assistant`` header follows every tool result, so it calls again;
    teaching them too would cost long contexts on a CPU)."""
    tokenizer = tool_tokenizer()
    tools = [factory().act]
    examples = sorted(
        {
            (tuple(context), tuple(reply))
            for row in data
            for answer in ANSWERS
            for context, reply in pairs(tokenizer, conversation(factory, row, [answer]), tools)[:1]
        }
    )
    width = max(len(c) + len(r) for c, r in examples)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([[*c, *r] + [pad] * (width - len(c) - len(r)) for c, r in examples])  # (B, T)
    labels = torch.tensor([[-100] * len(c) + [*r] + [-100] * (width - len(c) - len(r)) for c, r in examples])
    attention = (torch.arange(width) < torch.tensor([len(c) + len(r) for c, r in examples])[:, None]).long()
    model = tiny_model(seed=seed)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        loss = model(input_ids=ids, attention_mask=attention, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model.eval()


@functools.lru_cache(maxsize=4)
def _taught_state(env: str, rows: int, max_turns: int) -> dict:
    from mirl.integrations.trl.environment import environment_dataset

    factory = MirlEnvironment.factory(env, rollout={"max_turns": max_turns})
    model = teach(environment_dataset(env, rows), factory)
    return {k: v.clone() for k, v in model.state_dict().items()}


def taught_model(env: str = "frozenlake", rows: int = 2, max_turns: int = 2) -> torch.nn.Module:
    """A fresh copy of the taught model (taught once per process)."""
    model = tiny_model(seed=0)
    model.load_state_dict(_taught_state(env, rows, max_turns))
    return model
