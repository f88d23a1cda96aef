"""Images through veRL's own agent-loop worker: the ``mirl`` agent loop on image-rendered grid worlds.

veRL's ``AgentLoopWorker`` is built from the shipped vision setting (``configs/verl/sokoban-vl-ppo-topp09.yaml``)
with a local directory holding the tiny Qwen2.5-VL's config, tokenizer and image processor, so veRL's
``HFModelConfig`` loads the tokenizer and its ``hf_processor`` binds the model's ``get_rope_index`` to the processor.
The worker's ``_run_agent_loop`` builds the registered ``mirl`` loop (``hydra.utils.instantiate``, veRL's tokenizer
and processor), awaits it and passes its ``AgentLoopOutput`` through ``_agent_loop_postprocess``, which computes
``multi_modal_inputs`` and the multimodal position ids. Only the generation call is the test's: a
:class:`~mirl.integrations.verl.local_server.LocalServer` with scripted legal replies stands in for vLLM and records
the ``image_data`` of each call.

One stand-in outside veRL: transformers' ``AutoProcessor`` cannot build a Qwen2.5-VL processor without torchvision
(its video processor needs it; this environment has none), so while the worker is built it returns the processor
the model directory was written from (transformers' own ``Qwen2_5_VLProcessor``, :func:`tiny_vl_processor`).
"""

import asyncio
import contextlib
import json
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="needs veRL 0.9.1: run `bash scripts/test-verl.sh`")

import torch  # noqa: E402
import transformers  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker  # noqa: E402

from mirl.integrations.verl.launch import compose  # noqa: E402
from mirl.integrations.verl.local_server import LocalServer  # noqa: E402
from mirl.policy.scripted import ScriptedPolicy  # noqa: E402
from mirl.policy.tiny_vl import tiny_vl_config, tiny_vl_processor  # noqa: E402
from mirl.policy.vision_inputs import rope_positions  # noqa: E402
from mirl.rollout.vision import ImagesNeedVisionModel  # noqa: E402

SETTING = Path(__file__).resolve().parents[3] / "configs/verl/sokoban-vl-ppo-topp09.yaml"
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
IMAGE_ENVS = {
    "sokoban": {"render": "image", "cell_size": 28},
    "frozenlake": {"success_rate": 1.0, "render": "image", "cell_size": 28},
}


class ImageServer(LocalServer):
    """LocalServer over scripted replies that also records each call's ``image_data`` and sampled ids."""

    def __init__(self, policy) -> None:
        super().__init__(policy)
        self.images: list = []
        self.sampled: list[tuple[int, ...]] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, image_data=None, **kwargs):
        self.images.append(image_data)
        served = await super().generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params, **kwargs)
        self.sampled.append(served.token_ids)
        return served


@pytest.fixture(scope="module")
def vl_model_dir(tmp_path_factory):
    """The tiny Qwen2.5-VL's config.json, tokenizer and image processor (no weights: veRL's worker reads none)."""
    path = tmp_path_factory.mktemp("tiny-vl")
    processor = tiny_vl_processor()
    config = tiny_vl_config()
    config.architectures = ["Qwen2_5_VLForConditionalGeneration"]  # veRL's HFModelConfig reads it
    config.save_pretrained(path)
    processor.tokenizer.save_pretrained(path)
    processor.image_processor.save_pretrained(path)
    return str(path)


def make_worker(model_dir: str) -> AgentLoopWorker:
    config = compose(SETTING, [f"actor_rollout_ref.model.path={model_dir}", "mirl.rollout.max_new_tokens=40"])
    OmegaConf.resolve(config)
    with pytest.MonkeyPatch.context() as patch:  # no torchvision here: module docstring
        patch.setattr(transformers.AutoProcessor, "from_pretrained", lambda *args, **kwargs: tiny_vl_processor())
        return AgentLoopWorker(config, llm_client=None)


@pytest.fixture(scope="module")
def worker(vl_model_dir):
    worker = make_worker(vl_model_dir)
    assert type(worker.processor).__name__ == "Qwen2_5_VLProcessor" and hasattr(worker.processor, "get_rope_index")
    assert worker.rollout_config.limit_images == 5  # the setting's key reaches veRL's RolloutConfig (vLLM's limit)
    return worker


@contextlib.contextmanager
def as_text_model(worker):
    """The worker as veRL builds it for a text model: no processor, a text model type (Qwen2)."""
    kept = worker.processor, worker.hf_model_type
    worker.processor, worker.hf_model_type = None, "qwen2"
    try:
        yield worker
    finally:
        worker.processor, worker.hf_model_type = kept


def run_loop(worker, server, env: str, options: dict):
    """One session through veRL's ``_run_agent_loop``: the mirl loop, then ``_agent_loop_postprocess``."""
    worker.llm_client = server
    trajectory = {"step": 0, "sample_index": 0, "rollout_n": 0, "validate": False}
    row = {"env_name": env, "env_seed": 3, "env_options": json.dumps(options), "session_id": 0, "raw_prompt": []}
    return asyncio.run(worker._run_agent_loop(dict(SAMPLING), trajectory, agent_name="mirl", trace=False, **row))


def image_runs(ids: list[int], image_token: int) -> list[tuple[int, int]]:
    """``(start, length)`` of each run of the image placeholder token."""
    runs, t = [], 0
    while t < len(ids):
        if ids[t] == image_token:
            end = t
            while end < len(ids) and ids[end] == image_token:
                end += 1
            runs.append((t, end - t))
            t = end
        else:
            t += 1
    return runs


@pytest.mark.parametrize("env", sorted(IMAGE_ENVS))
def test_an_image_episode_through_verls_worker(env, worker, legal_reply):
    server = ImageServer(ScriptedPolicy(worker.tokenizer, legal_reply))
    out = run_loop(worker, server, env, IMAGE_ENVS[env])
    tok, merge = worker.tokenizer, worker.processor.image_processor.merge_size
    image_token, start_token, end_token = (
        tok.convert_tokens_to_ids(t) for t in ("<|image_pad|>", "<|vision_start|>", "<|vision_end|>")
    )
    turns = len(out.extra_fields["mirl"]["turns"])
    assert turns >= 2

    # what travels: one board per user message; call t carries the t + 1 images of its context, in order
    images = out.multi_modal_data["images"]
    assert len(images) == turns and len(server.images) == turns
    for t, sent in enumerate(server.images):
        assert [id(image) for image in sent] == [id(image) for image in images[: t + 1]]
    prompts = [request[1] for request in server.requests]
    assert [prompt.count(start_token) for prompt in prompts] == list(range(1, turns + 1))

    # what veRL computed: pixel values and grid sizes for every image
    mm = out.multi_modal_inputs
    grids = mm["image_grid_thw"]  # (I, 3)
    assert grids.shape == (turns, 3)
    assert mm["pixel_values"].shape[0] == int(grids.prod(dim=1).sum())

    # the sequence: each image expanded exactly once, inside its vision block, the size veRL's processor gives
    valid = out.attention_mask[0].bool()
    ids = out.input_ids[0, valid].tolist()
    runs = image_runs(ids, image_token)
    assert [length for _, length in runs] == (grids.prod(dim=1) // merge**2).tolist()
    assert all(ids[s - 1] == start_token and ids[s + n] == end_token for s, n in runs)
    assert ids.count(start_token) == ids.count(end_token) == turns
    prompt_len = int(out.attention_mask[0, : out.prompt_ids.shape[1]].sum())
    assert len(image_runs(ids[:prompt_len], image_token)) == 1  # the first board is in the prompt

    # response_mask: 1 exactly on the sampled ids, in order; no image token is trained
    response_valid = out.attention_mask[0, out.prompt_ids.shape[1] :].bool()
    response = out.response_ids[0, response_valid]
    mask = out.response_mask[0, response_valid].bool()
    assert response[mask].tolist() == [t for sampled in server.sampled for t in sampled]
    assert not (response[mask] == image_token).any()

    # position ids: veRL's layout (text row + 3 multimodal rows), the rows mirl's rope_positions gives
    assert out.position_ids.shape == (1, 4, out.input_ids.shape[1])
    keyed = list(ids)
    for i, (s, n) in enumerate(runs):
        keyed[s : s + n] = [-(i + 1)] * n
    patches = {-(i + 1): (int(g[1]) // merge, int(g[2]) // merge) for i, g in enumerate(grids)}
    expected = rope_positions(torch.tensor([keyed]), torch.arange(len(ids))[None], patches)[:, 0]  # (3, T)
    assert torch.equal(out.position_ids[0, 1:, valid], expected)
    assert torch.equal(out.position_ids[0, 0, valid], torch.arange(len(ids)))
    s, n = runs[0]
    assert not torch.equal(out.position_ids[0, 2, valid][s : s + n], out.position_ids[0, 3, valid][s : s + n])


def test_a_text_env_with_a_vision_model_calls_and_returns_as_without_one(worker, legal_reply):
    """The text path is unchanged: with veRL's processor present, a text env sends no image_data and the output
    holds no multi_modal_data; its ids, mask and log-probs equal those of the loop built without a processor."""
    server = ImageServer(ScriptedPolicy(worker.tokenizer, legal_reply))
    out = run_loop(worker, server, "sokoban", {})
    assert server.images == [None] * len(server.requests) and out.multi_modal_data is None
    assert not (out.input_ids == worker.tokenizer.convert_tokens_to_ids("<|vision_start|>")).any()

    plain = ImageServer(ScriptedPolicy(worker.tokenizer, legal_reply))
    with as_text_model(worker):
        text = run_loop(worker, plain, "sokoban", {})
    assert [r[1:] for r in plain.requests] == [r[1:] for r in server.requests]  # prompt ids, sampling params
    for name in ("input_ids", "attention_mask", "response_mask", "response_logprobs"):
        assert torch.equal(getattr(out, name), getattr(text, name)), name


def test_an_image_env_without_a_processor_is_a_one_line_error(worker, legal_reply):
    server = ImageServer(ScriptedPolicy(worker.tokenizer, legal_reply))
    with as_text_model(worker), pytest.raises(ImagesNeedVisionModel, match="veRL gave the agent loop no proc") as error:
        run_loop(worker, server, "sokoban", IMAGE_ENVS["sokoban"])
    assert "\n" not in str(error.value) and server.requests == []


@pytest.mark.parametrize("where", ["inside", "first"])
def test_a_reply_that_samples_an_image_marker_ends_the_episode_before_it(where, worker, legal_reply):
    """veRL finds images by their token ids; a sampled ``<|vision_start|><|image_pad|>`` would count as an image.
    The reply is kept up to the marker (a prefix of what was sampled) and the episode ends there."""

    def script(context: str) -> str:
        reply = legal_reply(context)
        if context.count("Turn ") < 2:
            return reply
        return "<|vision_start|><|image_pad|>" + reply if where == "first" else reply[:6] + "<|vision_start|>" + reply

    server = ImageServer(ScriptedPolicy(worker.tokenizer, script))
    out = run_loop(worker, server, "sokoban", IMAGE_ENVS["sokoban"])
    record = out.extra_fields["mirl"]
    assert record["end_reason"] == "image_token" and len(record["turns"]) == 2
    start_token = worker.tokenizer.convert_tokens_to_ids("<|vision_start|>")
    valid = out.attention_mask[0].bool()
    ids = out.input_ids[0, valid].tolist()
    assert ids.count(start_token) == len(out.multi_modal_data["images"]) == 2  # no sampled marker in the sequence
    response_valid = out.attention_mask[0, out.prompt_ids.shape[1] :].bool()
    trained = out.response_ids[0, response_valid][out.response_mask[0, response_valid].bool()].tolist()
    kept = list(server.sampled[1][: server.sampled[1].index(start_token)])
    assert trained == list(server.sampled[0]) + kept  # the second reply up to the marker, as sampled
    assert out.multi_modal_inputs["image_grid_thw"].shape == (2, 3)
