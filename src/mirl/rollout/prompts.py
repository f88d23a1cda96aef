"""Prompt text (system prompt, per-turn user message) and the chat format that wraps it into token ids.

System prompt: a role sentence, the env instruction, the symbol legend (grid envs), the legal actions and how
many a turn may hold (``||``-separated). User message of turn t: the turn number, the last turn's reward and, after
a turn without a legal action, a warning that the state is unchanged; in the memory context mode, the env's recap
of the episode; then the state text, the actions left and the format reminder with a length hint. The assistant
turn is always pre-filled with ``<think>``.

A question (an env with ``question_prompt``: a single-turn :class:`~mirl.envs.task.Task`) is not framed as a game:
the system prompt's role sentence asks for an answer, the user message is the question and the format reminder
(no turn number, no "State:", no actions left), and the format example reasons about a question, not a move
(:func:`question_message`, :func:`format_example`).

Chat format. :class:`ChatFormat` cuts the tokenizer's chat template into five constant text pieces, once, by
rendering placeholder messages: ``first(system, user)`` is the text of a conversation's first prompt and
``bridge(user)`` the text that closes an assistant reply, adds the next user message and opens the next
assistant turn. The engine encodes ``bridge(user) + "<think>"`` and appends those ids to the sampled ids, so a
reply is never decoded and re-encoded. A tokenizer without a chat template gets the plain template::

    System: {system}\\n\\nUser: {user}\\n\\nAssistant: <think>...{reply}\\n\\nUser: {user}\\n\\nAssistant: <think>

whose assistant turns have no closing text (an eos the model samples stays in the stream as sampled).

Env text stays text. A message is the template's text around its content (:class:`Message`), and the content,
which carries the env's instruction and observations, is encoded so that a special-token string in it is never
the special token (:func:`encode_message`): an observation cannot forge ``<|im_start|>assistant``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mirl.errors import UserError
from mirl.rollout.parsing import ACTION_SEPARATOR, ANSWER_OPEN, THINK_CLOSE, THINK_OPEN

ROLE_SENTENCE = "You are an agent that solves the task below by reasoning step by step and then acting."
QUESTION_ROLE_SENTENCE = "You answer the question below by reasoning step by step and then giving your answer."
FORMAT_REMINDER = "<think> [your thoughts] </think> <answer> [your answer] </answer>"
WORDS_PER_TOKEN = 0.75  # rough English average, only used for the length hint

_PLACEHOLDERS = ("MIRL_SYSTEM_SLOT", "MIRL_USER_ONE_SLOT", "MIRL_REPLY_SLOT", "MIRL_USER_TWO_SLOT")


def system_prompt(env, max_actions: int) -> str:
    """The system message for ``env`` when a turn may hold up to ``max_actions`` actions.

    >>> class Toy:
    ...     instruction = "Reach G."
    ...     symbol_legend = "P: you, G: goal"
    ...     action_words = ("Left", "Right")
    >>> print(system_prompt(Toy(), 2))
    You are an agent that solves the task below by reasoning step by step and then acting.
    Reach G.
    Symbols: P: you, G: goal
    Legal actions: Left, Right. A turn may hold up to 2 actions separated by "||", e.g. <answer>Left || Right</answer>.
    """
    question = getattr(env, "question_prompt", False)
    lines = [QUESTION_ROLE_SENTENCE if question else ROLE_SENTENCE, env.instruction]
    if env.symbol_legend:
        lines.append(f"Symbols: {env.symbol_legend}")
    words = env.action_words
    if words is None:
        lines.append(f"Give exactly one answer{'' if question else ' per turn'} inside the answer tags.")
    elif max_actions == 1:
        lines.append(
            f"Legal actions: {', '.join(words)}. A turn holds exactly 1 action, e.g. <answer>{words[0]}</answer>."
        )
    else:
        example = f" {ACTION_SEPARATOR} ".join((words * max_actions)[:2])
        lines.append(
            f"Legal actions: {', '.join(words)}. A turn may hold up to {max_actions} actions separated by "
            f'"{ACTION_SEPARATOR}", e.g. <answer>{example}</answer>.'
        )
    return "\n".join(lines)


def user_message(
    *,
    turn: int,
    observation: str,
    actions_left: int,
    max_new_tokens: int,
    last_reward: float | None = None,
    state_unchanged: bool = False,
    example: str | None = None,
    memory: str | None = None,
) -> str:
    """The user message of turn ``turn`` (1-based); ``last_reward`` is None on the first turn; ``example``, if
    given, is appended as an example reply; ``memory`` (the memory context mode's recap), if given, comes right
    before the state.

    >>> print(user_message(turn=2, observation="P_G", actions_left=9, max_new_tokens=100, last_reward=-0.1,
    ...                    state_unchanged=True))  # doctest: +NORMALIZE_WHITESPACE
    Turn 2.
    Reward of the last turn: -0.1
    Your last turn had no legal action, so the state is unchanged.
    State:
    P_G
    Actions left: 9.
    Always answer in the format <think> [your thoughts] </think> <answer> [your answer] </answer>.
    Max response length: 100 tokens (about 75 words).
    """
    lines = [f"Turn {turn}."]
    if last_reward is not None:
        lines.append(f"Reward of the last turn: {last_reward:g}")
    if state_unchanged:
        lines.append("Your last turn had no legal action, so the state is unchanged.")
    if memory is not None:
        lines.append(f"Memory of this episode: {memory}")
    lines += ["State:", observation, f"Actions left: {actions_left}."]
    return "\n".join([*lines, *_format_lines(max_new_tokens, example)])


def question_message(*, question: str, max_new_tokens: int, example: str | None = None) -> str:
    """The user message of a question (an env with ``question_prompt``): the question, then the format reminder
    with a length hint and, if given, an example reply; no turn, state or action framing.

    >>> print(question_message(question="Reverse the word 'plant'.", max_new_tokens=100))  # doctest: +ELLIPSIS
    Reverse the word 'plant'.
    Always answer in the format <think> [your thoughts] </think> <answer> [your answer] </answer>. Max response ...
    """
    return "\n".join([question, *_format_lines(max_new_tokens, example)])


def _format_lines(max_new_tokens: int, example: str | None) -> list[str]:
    words = int(max_new_tokens * WORDS_PER_TOKEN)
    reminder = (
        f"Always answer in the format {FORMAT_REMINDER}. "
        f"Max response length: {max_new_tokens} tokens (about {words} words)."
    )
    return [reminder] if example is None else [reminder, f"Example reply: {example}"]


def format_example(action_words, question: bool = False) -> str:
    """A one-line reply in the required format (``rollout.format_example``; off by default, as in the reference);
    for a question (``question=True``) its reasoning speaks of the question, not of a state and a move.

    Small models (~100M parameters) almost never produce the format from the instruction alone, so every reply
    earns the same penalty and no group has reward spread; one example fixes that at the cost of a hint.

    >>> format_example(("Left", "Right"))
    '<think> I read the state and pick the move that helps. </think> <answer> Left </answer>'
    >>> format_example(None, question=True)
    '<think> I work the question out step by step. </think> <answer> ... </answer>'
    """
    action = action_words[0] if action_words else "..."
    reasoning = QUESTION_REASONING if question else EXAMPLE_REASONING
    return f"<think> {reasoning} </think> <answer> {action} </answer>"


EXAMPLE_REASONING = "I read the state and pick the move that helps."  # the reasoning of ``format_example``
QUESTION_REASONING = "I work the question out step by step."  # ... and of a question's
EXAMPLE_REASONINGS = (EXAMPLE_REASONING, QUESTION_REASONING)  # a copy of either is no reasoning (diagnostics)


@dataclass(frozen=True)
class ChatFormat:
    """The constant text around messages: ``first = a + system + b + user + c``, ``bridge = d + user + e``."""

    conversation_open: str  # a: before the system message
    system_to_user: str  # b: closes the system message, opens the first user message
    user_to_assistant: str  # c: closes the first user message, opens the assistant turn
    reply_to_user: str  # d: closes an assistant reply, opens the next user message
    next_user_to_assistant: str  # e: closes a later user message, opens the assistant turn

    @classmethod
    def plain(cls) -> ChatFormat:
        """The documented template for tokenizers without a chat template."""
        return cls("System: ", "\n\nUser: ", "\n\nAssistant: ", "\n\nUser: ", "\n\nAssistant: ")

    @classmethod
    def from_tokenizer(cls, tokenizer) -> ChatFormat:
        """Cut the tokenizer's chat template at placeholder messages; the plain template if it has none."""
        if not getattr(tokenizer, "chat_template", None):
            return cls.plain()
        system, user1, reply, user2 = _PLACEHOLDERS
        first = _render(tokenizer, [("system", system), ("user", user1)])
        both = _render(tokenizer, [("system", system), ("user", user1), ("assistant", reply), ("user", user2)])
        if not both.startswith(first + reply) or any(first.count(p) != 1 for p in (system, user1)):
            raise ValueError(
                "expected a chat template whose second prompt extends the first and keeps messages verbatim, "
                f"got renders {first!r} and {both!r}; set tokenizer.chat_template=None to use the plain template"
            )
        a, rest = first.split(system)
        b, c = rest.split(user1)
        d, e = both[len(first + reply) :].split(user2)
        return cls(a, b, c, d, e)

    def system_parts(self, system: str) -> Message:
        """The conversation up to and including the system message (a shared prefix of every context)."""
        return Message(self.conversation_open, system, "")

    def first_user_parts(self, user: str) -> Message:
        """What follows :meth:`system_parts` in a first prompt, ending with the pre-filled ``<think>``."""
        return Message(self.system_to_user, user, self.user_to_assistant + THINK_OPEN)

    def bridge_parts(self, user: str) -> Message:
        """What follows a sampled reply: its closing text, the next user message, the header and ``<think>``."""
        return Message(self.reply_to_user, user, self.next_user_to_assistant + THINK_OPEN)

    def system_text(self, system: str) -> str:
        return self.system_parts(system).text

    def first_user_text(self, user: str) -> str:
        return self.first_user_parts(user).text

    def bridge_text(self, user: str) -> str:
        return self.bridge_parts(user).text


@dataclass(frozen=True)
class Message:
    """A message's text between the template's own text: ``before + content + after``. The template text may hold
    special tokens; the content (which carries env text) never becomes one (:func:`encode_message`)."""

    before: str
    content: str
    after: str

    @property
    def text(self) -> str:
        return self.before + self.content + self.after


def _render(tokenizer, messages: list[tuple[str, str]]) -> str:
    return render_chat(tokenizer, [{"role": role, "content": content} for role, content in messages])


class ChatTemplateError(UserError, ValueError):
    """The model's chat template does not render (a template error, or an operation its sandbox refuses)."""


def render_chat(tokenizer, conversation: list[dict]) -> str:
    """``tokenizer.apply_chat_template(conversation)`` as text with the generation prompt; a template that fails
    to render (jinja2's ``TemplateError``, including the ``SecurityError`` of transformers' sandbox for a
    template reaching for Python internals) is a :class:`ChatTemplateError` naming the reason."""
    from jinja2 import TemplateError

    try:
        return tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    except TemplateError as error:
        reason = " ".join(str(error).split())[:200]
        raise ChatTemplateError(
            f"the model's chat template failed to render ({type(error).__name__}: {reason}); use a model with a "
            "working template, or set tokenizer_config.json's chat_template to a trusted one"
        ) from None


def encode(tokenizer, text: str) -> tuple[int, ...]:
    """Token ids of ``text`` with no special tokens added (templates already hold theirs)."""
    return tuple(tokenizer.encode(text, add_special_tokens=False))


def encode_message(tokenizer, message: Message) -> tuple[int, ...]:
    """Token ids of ``message`` whose content stays literal text: a control token's text in the content (an env
    observation holding ``<|im_start|>assistant`` or ``<tool_call>``, say, or a fullwidth spelling a normaliser
    turns into one) is encoded as the ordinary text it spells, never as the control token
    (:func:`control_ids`), so env text cannot forge a turn of the conversation or a tool call.

    The whole message is encoded first; when its control ids are exactly the template's own (nearly always), those
    ids are the answer, as before. Otherwise the template text and the content are encoded apart
    (:func:`encode_literal`). Comparing ids, not strings, sees what the tokenizer matched after its normaliser.
    """
    control = control_ids(tokenizer)
    ids = encode(tokenizer, message.text)
    if control.isdisjoint(ids):
        return ids
    before, after = encode(tokenizer, message.before), encode(tokenizer, message.after)
    if [i for i in ids if i in control] == [i for i in before + after if i in control]:
        return ids
    return before + encode_literal(tokenizer, message.content) + after


def encode_literal(tokenizer, text: str) -> tuple[int, ...]:
    """Token ids of ``text`` in which no control token's text becomes its id.

    The tokenizer's ``split_special_tokens`` handles tokens flagged special. What it leaves (added tokens not
    flagged special, such as Qwen2.5's ``<tool_call>``; a tokenizer that ignores the flag) is cut out of the text
    as the normaliser leaves it, and each such piece is encoded as its first character and the rest apart; an id
    that still comes out (a marker inside a marker) is dropped.
    """
    control = control_ids(tokenizer)
    ids = tuple(tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True))
    if control.isdisjoint(ids):
        return ids
    pieces = []
    for piece in _control_pattern(tokenizer).split(_normalized(tokenizer, text)):
        pieces += [piece[:1], piece[1:]] if piece in control_strings(tokenizer) else [piece]
    ids = (i for p in pieces if p for i in tokenizer.encode(p, add_special_tokens=False, split_special_tokens=True))
    return tuple(i for i in ids if i not in control)


def _normalized(tokenizer, text: str) -> str:
    """``text`` as the tokenizer's normaliser leaves it (NFKC: ``＜｜turn｜＞`` becomes ``<|turn|>``); unchanged
    for a tokenizer without one."""
    normalizer = getattr(getattr(tokenizer, "backend_tokenizer", None), "normalizer", None)
    return normalizer.normalize_str(text) if normalizer is not None else text


def _control_pattern(tokenizer) -> re.Pattern:
    """A pattern that splits text at the control strings, longest first, keeping them as pieces."""
    strings = sorted(control_strings(tokenizer), key=len, reverse=True)
    return re.compile("(" + ("|".join(map(re.escape, strings)) or "(?!)") + ")")  # (?!) matches nothing


def special_strings(tokenizer) -> tuple[str, ...]:
    """The text of every special token of ``tokenizer`` (its named specials and added tokens marked special), but the
    unknown-word token, which env text legitimately encodes to in a word-level vocabulary."""
    return _specials(tokenizer).strings


def special_ids(tokenizer) -> frozenset[int]:
    return _specials(tokenizer).ids


def control_strings(tokenizer) -> tuple[str, ...]:
    """The special strings and the text of every added token not flagged special (Qwen2.5's ``<tool_call>`` and FIM
    markers): the tokenizer matches all of them whole in any text. Not control tokens: added tokens of whitespace
    only, and mirl's own reply tags (:data:`REPLY_TAGS`, which mirl's prompt text spells in every user message)."""
    return _specials(tokenizer).control_strings


def control_ids(tokenizer) -> frozenset[int]:
    return _specials(tokenizer).control_ids


# delimit the reply inside the assistant turn (Qwen3 adds <think> as a plain added token); never a turn's boundary
REPLY_TAGS = (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, "</answer>")


@dataclass(frozen=True)
class _Specials:
    tokenizer: object
    strings: tuple[str, ...]
    ids: frozenset[int]
    control_strings: tuple[str, ...]
    control_ids: frozenset[int]


_SPECIALS: dict[int, _Specials] = {}


def _specials(tokenizer) -> _Specials:
    cached = _SPECIALS.get(id(tokenizer))
    if cached is not None and cached.tokenizer is tokenizer:
        return cached
    strings = {str(t) for t in getattr(tokenizer, "all_special_tokens", ())}
    ids = set(getattr(tokenizer, "all_special_ids", ()))
    plain: dict[str, int] = {}  # added tokens not flagged special
    for token_id, token in dict(getattr(tokenizer, "added_tokens_decoder", {}) or {}).items():
        if getattr(token, "special", False):
            strings.add(str(token.content))
            ids.add(int(token_id))
        elif str(token.content).strip() and str(token.content) not in REPLY_TAGS:
            plain[str(token.content)] = int(token_id)
    unknown = getattr(tokenizer, "unk_token", None)  # an unknown word's id: the env text's own, not a marker
    strings.discard(unknown)
    plain.pop(unknown, None)
    ids.discard(getattr(tokenizer, "unk_token_id", None))
    strings.discard("")
    entry = _Specials(
        tokenizer,
        tuple(sorted(strings)),
        frozenset(ids),
        tuple(sorted(strings | set(plain))),
        frozenset(ids | set(plain.values())),
    )
    _SPECIALS[id(tokenizer)] = entry
    return entry
