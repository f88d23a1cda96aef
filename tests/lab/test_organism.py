"""The model organism: its tokenizer covers every context the engine writes, its build is deterministic, an organism
run goes through `mirl train`, and (slow, on the real build) success needs input-dependent reasoning."""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from mirl.cli import main
from mirl.config import RolloutConfig
from mirl.lab.organism import Recipe, build_organism, organism_tokenizer, scripted_reply
from mirl.policy.scripted import ScriptedPolicy
from mirl.rollout.engine import run_episodes
from mirl.types import EnvSpec

TINY = Recipe(episodes=32, skill_steps=4, skill_batch_size=8, mix_steps=4, batch_size=8)
SHORT = Recipe(episodes=256, skill_steps=120, skill_batch_size=32, mix_steps=60, batch_size=16)  # writes the format


def test_the_tokenizer_covers_every_context_and_reply_of_the_engine():
    tokenizer = organism_tokenizer()
    rng = np.random.default_rng(0)
    policy = ScriptedPolicy(tokenizer, lambda context: scripted_reply(context, rng, 0.5))
    config = RolloutConfig(max_turns=2, max_actions_per_turn=1, max_new_tokens=16, max_context_tokens=1024)
    specs = [EnvSpec("keysum", seed, {"hard_share": 0.5}) for seed in range(16)]
    episodes = run_episodes(policy, specs, 2, config)
    for episode in episodes:
        for turn in episode.turns:
            assert tokenizer.unk_token_id not in turn.context_ids + turn.response_ids
    # every turn was scripted from the question the engine showed: grounded replies are right
    grounded = [t for e in episodes for t in e.turns if " s " in t.response_text]
    assert grounded and all(t.reward == 1.0 for t in grounded)


def test_building_twice_gives_identical_weights(tmp_path):
    first, second = build_organism(tmp_path / "a", TINY), build_organism(tmp_path / "b", TINY)
    weights_a, weights_b = load_file(first / "model.safetensors"), load_file(second / "model.safetensors")
    assert weights_a.keys() == weights_b.keys()
    assert all(bool((weights_a[k] == weights_b[k]).all()) for k in weights_a)
    info = json.loads((first / "organism.json").read_text())
    assert info["recipe"]["skill_steps"] == 4 and info["parameters"] > 100_000
    assert not list(tmp_path.glob(".a-*"))  # the staging directory is gone


def test_an_organism_run_goes_through_mirl_train(tmp_path):
    model = build_organism(tmp_path / "organism", SHORT)
    out = tmp_path / "runs"
    args = ["train", "configs/lab/f-low.yaml", f"model.name={model}", "trainer.iterations=2", "trainer.name=lab",
            f"trainer.output_dir={out}", "rollout.prompts_per_iteration=4", "rollout.group_size=4"]  # fmt: skip
    assert main(args) == 0
    lines = [json.loads(line) for line in (out / "lab" / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 2
    for line in lines:  # diagnostics every iteration, and the scorer-free measures beside them
        assert line["diag/trajectory/columns"] >= 8
        assert 0.0 <= line["reasoning/template_frac"] <= 1.0 and "reasoning/cross_input_overlap" in line
    assert (out / "lab" / "report.html").is_file()


@pytest.mark.slow
def test_success_needs_input_dependent_reasoning():
    """On the real organism: from the solver's reasoning it answers nearly always; from a fixed template or another
    instance's reasoning at chance. 64 instances x 4 samples x 2 questions = 512 answers; at p = 1/8 the binomial
    SD is sqrt(0.125 * 0.875 / 512) = 0.0146, so chance +- 0.06 is a 4-SD band."""
    from mirl.lab.swap import swap_success
    from mirl.policy.hf import HFPolicy

    policy = HFPolicy.load("keysum-organism", device="cpu")
    assert swap_success(policy, "solver") > 0.9
    for mode in ("template", "other"):
        assert abs(swap_success(policy, mode) - 0.125) < 0.06


@pytest.mark.parametrize("module", ["mirl.lab.organism", "mirl.envs.lab.keysum"])
def test_doctests(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.failed == 0 and result.attempted > 0


def test_the_direct_recipe_answers_one_letter_questions_right_after_a_template():
    from mirl.lab.organism import direct_recipe

    rng = np.random.default_rng(3)
    recipe = direct_recipe()
    tokenizer = organism_tokenizer(16, recipe.easy_shown)
    policy = ScriptedPolicy(tokenizer, lambda context: scripted_reply(context, rng, 0.0, recipe.direct_answer))
    config = RolloutConfig(max_turns=2, max_actions_per_turn=1, max_new_tokens=16, max_context_tokens=1024)
    options = {"hard_share": 0.5, "easy_letters": 1, "easy_shown": recipe.easy_shown}
    specs = [EnvSpec("keysum", seed, options) for seed in range(40)]
    turns = [t for e in run_episodes(policy, specs, 1, config) for t in e.turns]
    assert all(tokenizer.unk_token_id not in t.context_ids + t.response_ids for t in turns)
    # every reply is a template: one-letter questions answered right, three-letter ones at random (1/8)
    named = [(len(t.observation.split("add:")[1].split("=")[0].split()), t.reward) for t in turns]
    easy, hard = [r for n, r in named if n == 1], [r for n, r in named if n == 3]
    assert easy and hard and all(r == 1.0 for r in easy) and sum(hard) / len(hard) < 0.4


def test_the_direct_recipe_teaches_direct_answers_in_phase_one_and_keeps_the_default_data():
    from mirl.envs.lab.keysum import parse_observation
    from mirl.lab.organism import direct_recipe, skill_batch

    tokenizer = organism_tokenizer(16, direct_recipe().easy_shown)
    small = {"skill_steps": 2, "skill_batch_size": 32}
    direct = skill_batch(tokenizer, Recipe(**(vars(direct_recipe()) | small)))
    direct_rows = [tokenizer.decode(row[mask].tolist()) for row, mask in zip(direct.ids, direct.target, strict=True)]
    contexts = [tokenizer.decode(row[att & ~mask].tolist()) for row, att, mask in
                zip(direct.ids, direct.attention, direct.target, strict=True)]  # fmt: skip
    one_letter = [(c, r) for c, r in zip(contexts, direct_rows, strict=True) if " s " not in r and "add" in c]
    templates = [(c, r) for c, r in one_letter if not any(ch.isdigit() for ch in r.split("</think>")[0])]
    assert templates  # some one-letter questions answered by a template and the right answer
    for context, reply in templates:
        key_part = "key : " + context.split("key : ")[-1]
        key, letters = parse_observation(key_part.replace(" :", ":").split(" Actions")[0].replace(" add:", "\nadd:"))
        assert len(letters) == 1 and reply.split()[-2] == str(key[letters])
        assert f"{letters} = {key[letters]}" in context  # the question shows its answer (keysum's easy_shown)
    assert tokenizer.unk_token_id not in direct.ids.tolist()
    default = skill_batch(tokenizer, Recipe(**small))
    assert default.ids.shape[0] == 64 and not torch.equal(default.ids[:4], direct.ids[:4])


def test_the_shown_answer_word_is_added_only_to_the_direct_organism_vocabulary():
    from mirl.lab.organism import vocabulary

    default, shown = vocabulary(), vocabulary(easy_shown=True)
    assert "=" not in default and set(shown) - set(default) == {"="}  # the default organism's vocabulary is unchanged
