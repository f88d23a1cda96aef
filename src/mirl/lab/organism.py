"""The model organism's policy: a tiny word-level Llama that starts as an LLM does on ``keysum``.

:func:`build_organism` writes an ordinary Hugging Face model directory (safetensors weights, a word-level tokenizer
over the task's vocabulary, a ChatML chat template), so ``model.name=DIR`` loads it through the same code as any
model; the built-in name ``keysum-organism`` builds it once into the mirl cache (like SmolLM2's conversion).

How it is made. A scripted solver plays ``keysum`` through mirl's own rollout engine (a
:class:`~mirl.policy.scripted.ScriptedPolicy` with the organism's tokenizer, the rollout settings of
``configs/lab/``), so every training sequence is token for token the context the RL policy will be shown. Each
turn's reply is, with probability ``grounded_share``, the grounded trace
(:func:`~mirl.envs.lab.keysum.solution_reasoning` and the correct answer) and otherwise a template trace
(:func:`~mirl.envs.lab.keysum.template_reasoning` and a
uniformly drawn answer). Supervised training on the replies' tokens (the context is not in the loss) gives a policy
that is always well-formed, often generic and sometimes grounded; after a template it answers at chance.

Determinism: the traces come from seeded envs and a seeded reply RNG, the weights from ``seed`` inside
``torch.random.fork_rng``, the batches from a seeded generator, on one thread; two builds with the same arguments
give identical weights (a test compares them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from mirl.envs.lab import keysum
from mirl.envs.lab.keysum import LETTERS, SUM_WORD, TEMPLATE_WORDS, KeySumEnv, solution_reasoning, template_reasoning
from mirl.policy.tiny import SPECIAL_TOKENS, chatml_tokenizer
from mirl.rollout.parsing import THINK_CLOSE, THINK_OPEN
from mirl.rollout.prompts import format_example, system_prompt, user_message

TAGS = (THINK_OPEN, THINK_CLOSE, "<answer>", "</answer>")
UNKNOWN = "[UNK]"
NAME = "keysum-organism"
VERSION = 1  # bump when the recipe changes: the cache directory is keyed by it
DIRECT_NAME = "keysum1-organism"  # the mechanism study's variant: one-letter easy questions, answered without reasoning
# v1 (2 layers, direct answers only in phase 2) and v2 (3 layers, direct answers in phase 1 too) failed the study's
# swap gate (easy success 0.125 and 0.221 after a template); v3's easy questions show their answer (keysum easy_shown)
DIRECT_VERSION = 3


@dataclass(frozen=True)
class Recipe:
    """Everything a build depends on (written beside the weights as ``organism.json``)."""

    seed: int = 0
    grounded_share: float = 0.3  # P(a turn's trace is grounded); the rest are template traces
    hard_share: float = 0.5  # hard instances in the traces, so three-letter sums are learned too
    episodes: int = 3072  # scripted episodes (2 turns each) for the second phase
    skill_steps: int = 1000  # phase 1: steps on one user message -> grounded reply (learns the skill)
    skill_batch_size: int = 64  # short sequences per phase-1 step
    mix_steps: int = 300  # phase 2: steps on the engine's full contexts with the grounded/template mix
    batch_size: int = 32  # episodes per phase-2 step
    lr: float = 5e-3
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    max_new_tokens: int = 16  # the rollout setting the prompts are rendered with (configs/lab)
    max_turns: int = 2
    easy_letters: int = 2  # letters an easy question names (keysum's option): 1 for the mechanism study's variant
    direct_answer: bool = False  # a template trace on a one-letter question ends in the right answer, not a random one
    skill_direct_share: float = 0.0  # phase 1: share of one-letter questions answered by a template and the answer
    easy_shown: bool = False  # keysum's option: a one-letter question shows its answer (``add: b = 5``)
    template_longest: int = 7  # words in the longest template trace (4 to this many)


@dataclass(frozen=True)
class Sequences:
    """Right-padded training rows: token ids, which positions are real, which are reply tokens (in the loss)."""

    ids: torch.Tensor  # (B, T) long
    attention: torch.Tensor  # (B, T) bool
    target: torch.Tensor  # (B, T) bool


def vocabulary(max_new_tokens: int = 16, easy_shown: bool = False) -> list[str]:
    """Every word the organism can read or write: the prompt's words as mirl renders them for ``keysum``, the
    symbols, letters, template words, numbers 0..255 and the tags; the unknown word comes first after specials.
    ``easy_shown`` adds the word of keysum's shown answers (the default vocabulary stays as it was)."""
    from tokenizers import pre_tokenizers

    env = KeySumEnv(hard_share=0.5)
    texts = [system_prompt(env, 1), format_example(None), "user assistant system done"]
    for turn in range(1, 9):
        for last in (None, 0.0, 1.0, -0.1, 0.9, 1.9):
            texts.append(
                user_message(
                    turn=turn,
                    observation=env.reset(seed=turn)[0],
                    actions_left=8,
                    max_new_tokens=max_new_tokens,
                    last_reward=last,
                    state_unchanged=last == -0.1,
                )
            )
    texts += [" ".join(TEMPLATE_WORDS), " ".join(LETTERS), SUM_WORD, " ".join(str(n) for n in range(256))]
    texts += [keysum.SHOWN] if easy_shown else []
    split = pre_tokenizers.Whitespace()
    words = {word for text in texts for word, _ in split.pre_tokenize_str(text)}
    return [*SPECIAL_TOKENS, UNKNOWN, *sorted(words - set(SPECIAL_TOKENS) - {UNKNOWN})]


def organism_tokenizer(max_new_tokens: int = 16, easy_shown: bool = False):
    """A word-level :class:`~transformers.PreTrainedTokenizerFast` over :func:`vocabulary`, with ChatML.

    >>> tok = organism_tokenizer()
    >>> tok.decode(tok.encode("<think> b 5 d 7 s 4 </think> <answer> 4 </answer>"))
    '<think> b 5 d 7 s 4 </think> <answer> 4 </answer>'
    """
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

    words = vocabulary(max_new_tokens, easy_shown)
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=UNKNOWN))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.add_special_tokens([AddedToken(t, normalized=False) for t in SPECIAL_TOKENS])
    backend.add_tokens([AddedToken(t, normalized=False) for t in TAGS])
    return chatml_tokenizer(backend, unk_token=UNKNOWN)


_QUESTION = re.compile(r"key ?:((?:\s+[a-h]\s+[0-7])+)\s+add ?:((?:\s+[a-h])+)")


def scripted_reply(
    context: str, rng: np.random.Generator, grounded_share: float, direct: bool = False, longest: int = 7
) -> str:
    """The scripted solver's reply to the last question in a decoded context: grounded or template (4 to
    ``longest`` words). A template reply answers at random, except with ``direct`` on a question naming one letter,
    whose symbol stands in the observation: there it answers right (a policy can, without reasoning).

    >>> ctx = "key : a 3 b 5 c 1 d 7 add : b d Actions left"
    >>> scripted_reply(ctx, np.random.default_rng(0), 1.0)
    ' b 5 d 7 s 4 </think> <answer> 4 </answer>'
    >>> scripted_reply("key : a 3 b 5 add : b", np.random.default_rng(0), 0.0, direct=True).split()[-3:]
    ['<answer>', '5', '</answer>']
    """
    questions = _QUESTION.findall(context)
    key, letters = {}, ""
    if questions:
        pairs, letters = questions[-1][0].split(), "".join(questions[-1][1].split())
        key = {pairs[i]: int(pairs[i + 1]) for i in range(0, len(pairs), 2)}
    if not questions or rng.random() >= grounded_share:
        reasoning, answer = template_reasoning(rng, longest), int(rng.integers(8))
        if direct and len(letters) == 1:
            answer = key[letters]
    else:
        reasoning, answer = solution_reasoning(key, letters), sum(key[x] for x in letters) % 8
    return f" {reasoning} {THINK_CLOSE} <answer> {answer} </answer>"


def skill_batch(tokenizer, recipe: Recipe):
    """Phase 1's data: ``skill_steps * skill_batch_size`` single user messages as the engine writes them (turn 1,
    or turn 2 after a reward line), each followed by the grounded reply; the loss covers the reply. Without the
    system prompt and the earlier turns these are about a third of a full context, and a tiny model learns the
    look-up and the sum on them in a fraction of the steps it needs inside full prompts (whose many tokens dilute
    the attention it starts with), as pretraining precedes instruction tuning."""
    from mirl.envs.lab.keysum import KeySumEnv
    from mirl.rollout.prompts import ChatFormat
    from mirl.trainer.specs import train_seed

    env = KeySumEnv(hard_share=recipe.hard_share, easy_letters=recipe.easy_letters, easy_shown=recipe.easy_shown,
                    split="train")  # fmt: skip
    rng = np.random.default_rng([recipe.seed, 2])
    fmt = ChatFormat.from_tokenizer(tokenizer)
    count = recipe.skill_steps * recipe.skill_batch_size
    rows, masks = [], []
    for i in range(count):
        observation, _ = env.reset(seed=train_seed(2 * 10**6 + recipe.seed, i // 4096, i % 4096))
        turn = 1 + int(rng.random() < 0.5)
        last = None if turn == 1 else float(rng.integers(2))
        user = user_message(turn=turn, observation=observation, actions_left=9 - turn,
                            max_new_tokens=recipe.max_new_tokens, last_reward=last)  # fmt: skip
        text = fmt.first_user_text(user) if turn == 1 else fmt.bridge_text(user)
        prompt = tokenizer.encode(text, add_special_tokens=False)
        grounded = 1.0
        if recipe.skill_direct_share and len(env.asked[0]) == 1:  # the default recipe draws exactly as before
            grounded = 1.0 - recipe.skill_direct_share
        reply = scripted_reply(observation, rng, grounded, recipe.direct_answer, recipe.template_longest)
        reply = tokenizer.encode(reply, add_special_tokens=False)
        rows.append(prompt + reply)
        masks.append([False] * len(prompt) + [True] * len(reply))
    length = max(len(row) for row in rows)
    ids = torch.full((count, length), tokenizer.pad_token_id, dtype=torch.long)  # (B, T)
    attention, response = torch.zeros(count, length, dtype=torch.bool), torch.zeros(count, length, dtype=torch.bool)
    for b, (row, mask) in enumerate(zip(rows, masks, strict=True)):
        ids[b, : len(row)], attention[b, : len(row)] = torch.tensor(row), True
        response[b, : len(row)] = torch.tensor(mask)
    return Sequences(ids, attention, response)


def scripted_episodes(tokenizer, recipe: Recipe):
    """Phase 2's data: ``recipe.episodes`` episodes of the scripted solver (``recipe.grounded_share`` of its replies
    grounded) played through the rollout engine, one per instance."""
    from mirl.config import RolloutConfig
    from mirl.policy.scripted import ScriptedPolicy
    from mirl.rollout.engine import run_episodes
    from mirl.trainer.specs import train_seed
    from mirl.types import EnvSpec

    rng = np.random.default_rng([recipe.seed, 1, 0])
    policy = ScriptedPolicy(
        tokenizer,
        lambda context: scripted_reply(
            context, rng, recipe.grounded_share, recipe.direct_answer, recipe.template_longest
        ),
    )
    config = RolloutConfig(
        max_turns=recipe.max_turns, max_actions_per_turn=1, max_new_tokens=recipe.max_new_tokens,
        max_context_tokens=1024,
    )  # fmt: skip
    options = {"hard_share": recipe.hard_share, "split": "train"}
    if recipe.easy_letters != Recipe.easy_letters:  # the default recipe's specs (and so its build) stay as they were
        options["easy_letters"] = recipe.easy_letters
    if recipe.easy_shown:
        options["easy_shown"] = True
    # seeds of a run seed no training run uses (the run seeds of configs/lab are small)
    seeds = [train_seed(10**6 + recipe.seed, 2 * (i // 4096), i % 4096) for i in range(recipe.episodes)]
    specs = [EnvSpec("keysum", seed, options) for seed in seeds]
    episodes = []
    for begin in range(0, len(specs), 256):
        episodes += run_episodes(policy, specs[begin : begin + 256], 1, config)
    return episodes


def new_model(vocab_size: int, tokenizer, recipe: Recipe):
    """A randomly initialised Llama of the recipe's shape, drawn inside ``fork_rng``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=recipe.hidden_size,
        intermediate_size=2 * recipe.hidden_size,
        num_hidden_layers=recipe.num_layers,
        num_attention_heads=recipe.num_heads,
        num_key_value_heads=recipe.num_heads,
        max_position_embeddings=1024,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(recipe.seed)
        return LlamaForCausalLM(config)


def supervised_train(model, phases, recipe: Recipe, log=None) -> dict:
    """Cross-entropy on the replies' tokens (``Sequences.target``) of random mini-batches of rows, phase after phase;
    ``phases`` = [(sequences, steps, rows per step), ...], one warm-up and linear decay over all steps."""
    total = sum(steps for _, steps, _ in phases)
    generator = torch.Generator().manual_seed(recipe.seed)
    optimiser = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, lambda s: min(1.0, (s + 1) / 50) * (1 - s / total))
    model.train()
    losses = []
    for batch, steps, size in phases:
        for _ in range(steps):
            rows = torch.randint(len(batch.ids), (size,), generator=generator)
            mask = batch.attention[rows]
            length = int(mask.sum(1).max())
            ids, mask, target = batch.ids[rows, :length], mask[:, :length], batch.target[rows, :length]
            logits = model(input_ids=ids, attention_mask=mask.long()).logits[:, :-1]  # (B, T-1, V)
            token_loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
            loss = (token_loss * target[:, 1:]).sum() / target[:, 1:].sum()
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimiser.step()
            schedule.step()
            losses.append(loss.item())
            if log is not None and len(losses) % 100 == 0:
                log(f"organism: step {len(losses)}/{total}, loss {sum(losses[-100:]) / 100:.3f}")
    model.eval()
    return {"final_loss": sum(losses[-50:]) / min(50, len(losses))}


def build_organism(target: str | os.PathLike, recipe: Recipe = Recipe(), log=None) -> Path:
    """Build the organism into ``target`` (written to a temporary sibling, then renamed into place)."""
    from mirl.rollout.collate import collate

    target = Path(target).expanduser()
    started = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # a fixed thread count: the same floating-point sums on every machine
    try:
        tokenizer = organism_tokenizer(recipe.max_new_tokens, recipe.easy_shown)
        skill = skill_batch(tokenizer, recipe)
        episodes = collate(scripted_episodes(tokenizer, recipe), pad_id=tokenizer.pad_token_id)
        mix = Sequences(episodes.input_ids, episodes.attention_mask, episodes.response_mask)
        model = new_model(len(tokenizer), tokenizer, recipe)
        phases = [(skill, recipe.skill_steps, recipe.skill_batch_size), (mix, recipe.mix_steps, recipe.batch_size)]
        stats = supervised_train(model, phases, recipe, log)
    finally:
        torch.set_num_threads(threads)
    info = {
        "name": DIRECT_NAME if recipe.direct_answer else NAME,
        "version": VERSION,
        "recipe": asdict(recipe),
        "parameters": model.num_parameters(),
    }
    info |= stats | {"build_seconds": round(time.perf_counter() - started, 1)}
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / "organism.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
        staging.chmod(0o755)
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def cached_organism(
    cache_dir=None, log=None, name: str = NAME, recipe: Recipe | None = None, version: int = VERSION
) -> Path:
    """The built-in organism's directory in the mirl cache, built on first use."""
    from mirl.policy.sources import cache_root

    target = cache_root(cache_dir) / "models" / f"{name}-v{version}"
    if not (target / "config.json").is_file():
        log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        log(f"organism: building {name} once into {target} (about 2 minutes on 2 cores)")
        build_organism(target, recipe or Recipe(), log=log)
    return target


def direct_recipe() -> Recipe:
    """The mechanism study's organism (studies/mechanism): easy questions name one letter, and a template trace
    on one answers right, so the policy starts templated and still answers easy questions without reasoning.

    Version 2 (amended before any treatment run): answering a one-letter question in one token takes three
    look-ups (the named letter after ``add:``, that letter in the key, the symbol after it), one more than writing
    ``b 5`` step by step, and version 1's two layers answered it at chance after a template. So three layers, and
    half of phase 1's one-letter questions answered by a template and the right answer.

    Version 3 (amended again, before any treatment run; v2 answered easy questions at 0.221 after a template): an
    easy question shows its answer (keysum's ``easy_shown``: ``add: b = 5``), so answering it without reasoning is
    one copy of the symbol after ``=``, the same depth as a step of the written reasoning; back to two layers. Its
    templates run to 8 words: the study's gate writes an 8-word template sentence (mirl.lab.swap.FIXED_TEMPLATE),
    and a build whose templates stopped at 7 words answered easy questions right after 7-word templates but not
    after that sentence."""
    return Recipe(easy_letters=1, easy_shown=True, direct_answer=True, skill_direct_share=0.5, template_longest=8)


def cached_direct_organism(cache_dir=None, log=None) -> Path:
    """``keysum1-organism``: :func:`direct_recipe`'s organism in the mirl cache, built on first use."""
    return cached_organism(cache_dir, log, DIRECT_NAME, direct_recipe(), DIRECT_VERSION)
