"""The multi-turn rollout engine: P env instances x K samples, one batched generate call per turn.

Episode ``(p, k)`` plays ``specs[p]`` (every k shares the seed, so a group faces one initial state) and has
``group=p, sample=k``. Each turn, every active episode's context is built and all of them go to the policy in one
``generate`` call (split into chunks of ``config.generation_batch_size``); then each reply is parsed and its
actions stepped through the episode's env. Envs whose step waits on other processes (``concurrent_steps = True``,
e.g. DeepCoder's sandboxed test runs) are stepped on threads, so one turn's code checks run concurrently.

Per-turn rules (REFERENCE §7):

- The per-turn cap is ``min(config.max_actions_per_turn, env.max_actions_per_turn)`` (1 for free-form envs);
  pieces past the cap are ignored. The action budget is ``config.action_budget`` or the env's default; only
  actions the env accepted (``info["action_valid"]``) spend it, and none is stepped once it is spent.
- A turn is *bad* when the reply does not parse (including replies cut at ``max_new_tokens`` before
  ``</answer>``), holds no action, or holds an illegal action (an unknown action word, or one the env reports
  invalid). A bad turn gets ``config.format_penalty`` once. In a partly illegal turn the legal actions still
  execute, in order (as the reference does), and the penalty applies. When no action executed, the state is
  unchanged and the next user message says so.
- The episode ends when the env terminates or truncates (``end_reason`` "success" when ``info["success"]``,
  else "terminated" / "truncated"), when the budget is spent ("action_budget"), after ``config.max_turns`` turns
  (1 for single-turn envs; "max_turns"), or when even the current turn alone does not fit in the context budget
  with room for one reply token ("context_length"). ``success`` is ``info["success"]`` of the last executed step.
  An env that ends an episode for a reason of its own puts it in ``info["end_reason"]`` (the ``openenv`` env's
  failed calls, e.g. "remote_timeout"); in the info of ``reset`` it ends the episode before its first turn.
- Each turn records its reward (its actions' env rewards plus the penalty, plus ``config.wording_bonus`` when
  ``config.wording_regex`` is found in its reasoning Z: :func:`~mirl.rollout.reasoning_measures.earns_wording_bonus`,
  a search bounded by Z's length, at most ``max_new_tokens`` tokens) and the ``info["state_key"]`` of the state it
  started from (from reset or the last executed step; None if the env gives none).

Context budget: ``limit = min(config.max_context_tokens, policy.max_positions)`` (a warning says when the model's
positions are the smaller) bounds context + reply. Each generate call carries ``max_total_tokens = limit``; a reply
stopped there (or longer, from a policy that ignores the bound: it is cut) gets finish reason ``"context"``,
counted by ``rollout/context_capped_frac``. A user message longer than ``limit`` times the longest token's
characters (x2) cannot fit and ends the episode before it is tokenized.

Token-in, token-out. A context is ``system ids + first-prompt ids of the first kept turn j`` followed, for each
later turn, by the sampled ids and the ids of ``bridge(user message) + "<think>"`` (see
:class:`~mirl.rollout.prompts.ChatFormat`). When a reply ended with eos (``finish_reason == "eos"``) and its last
id equals the first bridge id (ChatML's ``<|im_end|>``), that first bridge id is not added again. Context modes:
``"full"`` keeps every turn from j on, where j starts at 0 and moves forward (never back) while the context is
longer than ``config.max_context_tokens``; ``"window"`` starts at the later of that and ``i - context_window + 1``
for turn i (the window counts the current turn); ``"memory"`` keeps only the current turn, whose user message
carries the env's recap of the episode (:mod:`mirl.rollout.memory`). Without a dropped turn, each full-mode context
extends the previous context and reply exactly, which is what :func:`~mirl.rollout.collate.collate` relies on.

In full mode the engine runs the rollout inside ``policy.prefix_cache()`` when the policy has one, so each turn
extends the previous turn's key/value cache instead of encoding the whole history again.

Images. An observation with images (:mod:`mirl.envs.images`) becomes a user message whose placeholders are the
images' token blocks as the policy's processor expanded them, once per image (:mod:`mirl.rollout.vision`); the
context carries the placed images (``Turn.images``) to ``generate`` and on to collation and the update. A policy
without a processor (a text model) refuses such observations with a message naming the fix.

Reproducibility: with ``sampling_seed``, chunk c of turn t samples with
:func:`~mirl.rollout.generation.turn_seed` ``(sampling_seed, t, c)`` (the generate side lives in
:mod:`mirl.rollout.generation`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mirl.config import RolloutConfig
from mirl.envs import make
from mirl.envs.base import StepRecord
from mirl.rollout.env_boundary import Boundary
from mirl.rollout.generation import Budget, bounded, context_budget, generate_turn
from mirl.rollout.memory import CONTEXT_MODES, first_kept_turn, memory_text
from mirl.rollout.parsing import THINK_OPEN, decode, parse_reply, reasoning_span
from mirl.rollout.prompts import (
    ChatFormat,
    encode_message,
    format_example,
    question_message,
    system_prompt,
    user_message,
)
from mirl.rollout.reasoning_measures import check_unramped, check_wording, earns_wording_bonus
from mirl.rollout.stepping import state_key_of, step_all, step_reply
from mirl.rollout.vision import Piece, encode_piece
from mirl.types import EnvSpec, Episode, Generation, Turn

ProgressFn = Callable[[int, int, int], None]  # (turn index, episodes active in it, episodes in all)


@dataclass
class _Live:
    """Mutable state of one episode while it is played (private to the engine)."""

    env: object
    spec: EnvSpec
    group: int
    sample: int
    cap: int  # actions per turn at most
    budget: int  # actions left
    max_turns: int
    system_ids: tuple[int, ...]
    observation: str
    images: list = field(default_factory=list)  # the current observation's images (info["images"])
    policy: object = None  # the policy whose processor prepares images (None: images are refused)
    boundary: Boundary = field(default_factory=Boundary)  # checks what the env returns (shared by a rollout)
    user_texts: list[str] = field(default_factory=list)
    user_images: list[list] = field(default_factory=list)  # turn t -> the images of user message t
    first_ids: dict[int, Piece] = field(default_factory=dict)  # turn j -> first-prompt ids of user j
    bridge_ids: dict[int, Piece] = field(default_factory=dict)  # turn i >= 1 -> bridge ids of user i
    turns: list[Turn] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)  # every env step so far (the memory mode's recap)
    start: int = 0  # first kept turn in full mode
    unchanged: bool = False
    state_key: str | None = None  # the env's info["state_key"] now (reset or last step), None if it gives none
    shown_key: str | None = None  # the key of the state the current turn started from
    success: bool = False
    end_reason: str | None = None


def run_episodes(
    policy,
    specs: Sequence[EnvSpec],
    group_size: int,
    config: RolloutConfig,
    *,
    sampling_seed: int | None = None,
    progress: ProgressFn | None = None,
) -> list[Episode]:
    """Play ``len(specs) * group_size`` episodes; returns them ordered by (group, sample).

    ``progress(turn, active, total)`` is called after each turn's generation, if given.
    """
    _validate(specs, group_size, config, sampling_seed)
    tokenizer = policy.tokenizer
    fmt = ChatFormat.from_tokenizer(tokenizer)
    budget = context_budget(policy, tokenizer, config)
    boundary = Boundary()  # one per rollout: it counts the rollout's image pixels
    lives = [
        _start(spec, p, k, fmt, tokenizer, config, boundary) for p, spec in enumerate(specs) for k in range(group_size)
    ]
    for live in lives:
        live.policy = policy  # user messages with images are encoded through the policy's processor
    reuse = getattr(policy, "prefix_cache", None) if config.context_mode == "full" else None
    with reuse() if reuse is not None else contextlib.nullcontext():
        _play(policy, lives, (fmt, tokenizer, config, budget), sampling_seed, progress)
    return [_finish(live) for live in lives]


run = run_episodes


def _play(policy, lives: list[_Live], setting, sampling_seed: int | None, progress: ProgressFn | None) -> None:
    """The turn loop; ``setting`` = (chat format, tokenizer, rollout config, context budget)."""
    fmt, tokenizer, config, budget = setting
    for turn in range(config.max_turns):
        active = [live for live in lives if live.end_reason is None]
        contexts = [_next_context(live, turn, fmt, tokenizer, config, budget) for live in active]
        playing = [(live, ctx) for live, ctx in zip(active, contexts, strict=True) if ctx is not None]
        if not playing:
            break
        generations = generate_turn(policy, [ctx for _, ctx in playing], turn, config, (sampling_seed, budget.tokens))
        generations = [
            bounded(generation, budget.tokens - len(ctx.ids), config.max_new_tokens)
            for (_, ctx), generation in zip(playing, generations, strict=True)
        ]
        texts = [THINK_OPEN + decode(tokenizer, generation.token_ids) for generation in generations]
        replies = [parse_reply(t, live.env.action_words, live.cap) for (live, _), t in zip(playing, texts, strict=True)]
        stepped = step_all([live for live, _ in playing], replies)
        for i, (live, ctx) in enumerate(playing):
            _record(live, ctx, generations[i], texts[i], replies[i], stepped[i], tokenizer, config)
        if progress is not None:
            progress(turn, len(playing), len(lives))


def _validate(specs, group_size: int, config: RolloutConfig, sampling_seed: int | None) -> None:
    if not specs:
        raise ValueError("expected at least one EnvSpec, got an empty list; pass the iteration's instances")
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}; set rollout.group_size=8")
    if config.context_mode not in CONTEXT_MODES:
        raise ValueError(
            f"rollout.context_mode must be one of {CONTEXT_MODES}, got {config.context_mode!r}; "
            "set rollout.context_mode=full"
        )
    for name in ("max_turns", "max_actions_per_turn", "max_new_tokens", "context_window", "max_context_tokens"):
        if getattr(config, name) < 1:
            raise ValueError(f"rollout.{name} must be >= 1, got {getattr(config, name)}; raise it")
    if config.generation_batch_size < 1:
        raise ValueError(f"rollout.generation_batch_size must be >= 1, got {config.generation_batch_size}")
    if config.action_budget is not None and config.action_budget < 1:
        raise ValueError(f"rollout.action_budget must be >= 1 or None, got {config.action_budget}")
    check_wording(config.wording_regex, config.wording_bonus)
    if sampling_seed is not None and sampling_seed < 0:
        raise ValueError(f"sampling_seed must be a non-negative int or None, got {sampling_seed}")


def _start(
    spec: EnvSpec, group: int, sample: int, fmt: ChatFormat, tokenizer, config: RolloutConfig, boundary=None
) -> _Live:
    """Make and reset the episode's env (checked at ``boundary``, a new one when None) and write its system prompt;
    an episode whose reset or prompt settings were refused, or whose env ended it at reset, plays no turn."""
    check_unramped(config.wording_bonus_ramp)  # every episode starts here, veRL's agent loop's too
    boundary = boundary if boundary is not None else Boundary()
    env = make(spec.env, **dict(spec.options))
    reset = boundary.reset(env, spec.seed)
    refused = reset.problem or boundary.prompt_problem(env)
    if refused is not None:
        return _Live(
            env, spec, group, sample, cap=1, budget=0, max_turns=1, system_ids=(), observation="",
            boundary=boundary, end_reason=refused,
        )  # fmt: skip
    cap = 1 if env.action_words is None else min(config.max_actions_per_turn, env.max_actions_per_turn)
    system_ids = encode_message(tokenizer, fmt.system_parts(system_prompt(env, cap)))
    info = reset.info
    return _Live(
        env=env,
        spec=spec,
        group=group,
        sample=sample,
        cap=cap,
        budget=config.action_budget if config.action_budget is not None else env.default_action_budget,
        max_turns=config.max_turns if env.multi_turn else 1,
        system_ids=system_ids,
        observation=reset.observation,
        images=reset.images,
        boundary=boundary,
        state_key=state_key_of(info),
        end_reason=info.get("end_reason"),  # set when the reset itself failed (a remote env): no turn is played
    )


def _next_context(live: _Live, turn: int, fmt: ChatFormat, tokenizer, config: RolloutConfig, budget: Budget):
    """Write turn ``turn``'s user message and return the context (ids and images), or None if the episode ends
    here.

    The context leaves room for at least one reply token: ``len(context) < budget.tokens``.
    """
    live.user_texts.append(_user_text(live, turn, config))
    live.user_images.append(list(live.images))
    if len(live.user_texts[turn]) > budget.chars:  # cannot fit: never tokenize a huge observation in full
        live.end_reason = "context_length"
        return None
    if turn > 0:
        message = fmt.bridge_parts(live.user_texts[turn])
        live.bridge_ids[turn] = encode_piece(live.policy, tokenizer, message, live.user_images[turn])
    start = first_kept_turn(config.context_mode, live.start, turn, config.context_window)
    context = _context(live, start, turn, fmt, tokenizer)
    while len(context) >= budget.tokens and start < turn:
        start += 1
        context = _context(live, start, turn, fmt, tokenizer)
    if len(context) >= budget.tokens:
        live.end_reason = "context_length"
        return None
    if config.context_mode == "full":
        live.start = start
    return context


def _user_text(live: _Live, turn: int, config: RolloutConfig) -> str:
    """Turn ``turn``'s user message: a question's plain prompt, or the turn framing of an env's state."""
    question = getattr(live.env, "question_prompt", False)
    example = format_example(live.env.action_words, question) if config.format_example else None
    if question:
        return question_message(question=live.observation, max_new_tokens=config.max_new_tokens, example=example)
    return user_message(
        turn=turn + 1,
        observation=live.observation,
        actions_left=live.budget,
        max_new_tokens=config.max_new_tokens,
        last_reward=live.turns[-1].reward if live.turns else None,
        state_unchanged=live.unchanged,
        example=example,
        memory=memory_text(live.env, live.steps) if config.context_mode == "memory" else None,
    )


def _context(live: _Live, start: int, turn: int, fmt: ChatFormat, tokenizer) -> Piece:
    """System ids, the first prompt of turn ``start``, then reply + bridge ids for every later turn."""
    if start not in live.first_ids:
        message = fmt.first_user_parts(live.user_texts[start])
        live.first_ids[start] = encode_piece(live.policy, tokenizer, message, live.user_images[start])
    context = Piece(live.system_ids) + live.first_ids[start]
    for previous in range(start, turn):
        reply = live.turns[previous]
        bridge = live.bridge_ids[previous + 1]
        closed = reply.finish_reason == "eos" and reply.response_ids and reply.response_ids[-1] == bridge.ids[0]
        reply_ids = reply.response_ids[:-1] if closed else reply.response_ids  # the bridge's first id closes it
        context = context + Piece(reply_ids) + bridge
    return context


def _apply(live: _Live, context: tuple[int, ...], generation: Generation, tokenizer, config: RolloutConfig) -> None:
    """One episode's turn on the calling thread: parse the reply, step its legal actions, record the turn.

    ``run_episodes`` does the same for a whole batch (stepping concurrent envs on threads); the veRL agent loop,
    which plays one episode per coroutine, calls this.
    """
    text = THINK_OPEN + decode(tokenizer, generation.token_ids)
    parsed = parse_reply(text, live.env.action_words, live.cap)
    _record(live, context, generation, text, parsed, step_reply(live, parsed), tokenizer, config)


def _record(live: _Live, context, generation: Generation, text: str, parsed, steps, tokenizer, config) -> None:
    """Record the turn and decide whether the episode ends."""
    shown, env_reward, executed, good = steps
    if live.end_reason is None and live.budget == 0:
        live.end_reason = "action_budget"
    live.unchanged = executed == 0
    live.turns.append(
        Turn(
            context_ids=context.ids,
            images=context.images,
            response_ids=tuple(generation.token_ids),
            response_logprobs=tuple(float(lp) for lp in generation.logprobs),
            response_text=text,
            observation=shown,
            reasoning_span=reasoning_span(tokenizer, generation.token_ids),
            actions=parsed.actions,
            reward=env_reward + (0.0 if good else config.format_penalty) + _wording_bonus(text, config),
            format_valid=parsed.format_valid,
            actions_valid=good,
            finish_reason=generation.finish_reason,
            state_key=live.shown_key,
        )
    )
    if live.end_reason is None and len(live.turns) >= live.max_turns:
        live.end_reason = "max_turns"


def _wording_bonus(text: str, config: RolloutConfig) -> float:
    return config.wording_bonus if earns_wording_bonus(config.wording_regex, text) else 0.0


def _finish(live: _Live) -> Episode:
    live.env.close()
    return Episode(
        spec=live.spec,
        group=live.group,
        sample=live.sample,
        turns=tuple(live.turns),
        success=live.success,
        end_reason=live.end_reason,  # always set: by _next_context or _apply
        system_prompt_ids=live.system_ids,
    )
