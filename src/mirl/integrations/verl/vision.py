"""Observation images inside veRL's agent loop: the engine's image encoding done with the processor veRL gives.

veRL builds the agent loop with ``processor`` = the model's ``AutoProcessor`` for a vision-language model and None
for a text model. :func:`image_encoder` turns it into what the rollout engine asks for (``process(image) ->
ImageInputs``, as :class:`~mirl.policy.hf_vision.VisionPolicy.process`): the processor expands the chat template's
image block once per image (:func:`~mirl.policy.vision_inputs.process_image`), and the context holds those ids,
exactly what is sent to the server. Without a processor an image observation stops the episode with a one-line
error naming the fix.

What travels as veRL's own multimodal loops pass it (``SingleTurnAgentLoop``, ``ToolAgentLoop``): each
``server_manager.generate`` call carries every image of its context, in order, as ``image_data``, and the
``AgentLoopOutput`` carries them as ``multi_modal_data={"images": [...]}``; veRL's agent-loop worker then computes
``multi_modal_inputs`` (pixel values, grid sizes) and the multimodal position ids itself.

Those position ids are found from token ids: every image-block token (``<|vision_start|>``, ``<|image_pad|>``,
...) in the sequence is read as part of an image. A reply that samples one would misplace every image after it,
so :func:`mirl.integrations.verl.episode.play_episode` keeps a vision episode's reply only up to its first such
token and ends the episode there (``end_reason="image_token"``).
"""

from __future__ import annotations

from functools import cached_property

from mirl.envs.images import image_id
from mirl.policy.vision_inputs import image_block_text, process_image
from mirl.rollout.vision import ImagesNeedVisionModel
from mirl.types import Episode, ImageInputs


class ProcessorImages:
    """``process(image)``: one observation image expanded by veRL's processor (once per distinct image)."""

    def __init__(self, processor) -> None:
        self.processor = processor
        self._processed: dict[str, ImageInputs] = {}  # content id -> processed image, one episode's images

    @cached_property
    def block(self) -> str:
        """The chat template's text for one image part (rendered once)."""
        return image_block_text(self.processor)

    def reserved_ids(self) -> frozenset[int]:
        """The ids veRL's position code reads as image markers: the image block's tokens and the video token.

        ``get_rope_index`` finds images by these ids anywhere in the sequence, so a reply must not contain them.
        """
        block = self.processor.tokenizer(self.block, add_special_tokens=False)["input_ids"]
        video = getattr(self.processor, "video_token_id", None)
        return frozenset(int(t) for t in block) | (frozenset() if video is None else {int(video)})

    def process(self, image) -> ImageInputs:
        key = image_id(image)
        if key not in self._processed:
            merge = int(self.processor.image_processor.merge_size)
            self._processed[key] = process_image(self.processor, self.block, image, key, merge)
        return self._processed[key]


class NoProcessor:
    """The encoder of a text model: an image observation is refused with the fix."""

    def reserved_ids(self) -> frozenset[int]:
        return frozenset()

    def process(self, image) -> ImageInputs:
        raise ImagesNeedVisionModel(
            "the env shows its state as images but veRL gave the agent loop no processor (the model is not a "
            "vision-language model); set actor_rollout_ref.model.path to one (e.g. Qwen/Qwen2.5-VL-3B-Instruct) "
            "or build the data with the env option render=text"
        )


def image_encoder(processor) -> ProcessorImages | NoProcessor:
    """What the engine encodes observation images with, from the processor veRL built (None: a text model)."""
    return NoProcessor() if processor is None else ProcessorImages(processor)


def episode_images(episode: Episode) -> list:
    """The RGB images of the episode's one sequence, in order: those of the last turn's context (every context
    extends the previous one, so it holds them all)."""
    if not episode.turns:
        return []
    return [place.image.image for place in sorted(episode.turns[-1].images, key=lambda place: place.start)]


__all__ = ["NoProcessor", "ProcessorImages", "episode_images", "image_encoder"]
