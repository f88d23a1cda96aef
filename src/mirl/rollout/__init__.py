"""Multi-turn rollouts: prompts, reply parsing, the batched engine, collation to tensors, JSONL records."""

from mirl.rollout.collate import collate, contexts_nest
from mirl.rollout.engine import run, run_episodes
from mirl.rollout.generation import turn_seed
from mirl.rollout.io import read_episodes, read_records, write_episodes
from mirl.rollout.parsing import ParsedReply, parse_reply, reasoning_span
from mirl.rollout.prompts import ChatFormat, system_prompt, user_message

__all__ = [
    "ChatFormat",
    "ParsedReply",
    "collate",
    "contexts_nest",
    "parse_reply",
    "read_episodes",
    "read_records",
    "reasoning_span",
    "run",
    "run_episodes",
    "system_prompt",
    "turn_seed",
    "user_message",
    "write_episodes",
]
