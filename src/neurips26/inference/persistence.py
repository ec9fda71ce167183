r"""Saving and loading calibration products and configs of the KV-cache quantisers, ``save_pretrained`` style.

Papers
------
"ADKV" (adaptive delta quantisation of the KV cache with EMA-tracked metadata) and "AdaKVQ"
(mixed-precision KV-cache quantisation driven by Average Attention Distance), NeurIPS 2026 submissions,
seed file ``004_01f475bc147a144d.txt``. Both are calibrated once per model; this module stores the result
so that a cache can be built later without recalibrating, in the spirit of ``transformers``'
``save_pretrained``/``from_pretrained`` and of peft's adapter folders.

What is persisted
-----------------
- :class:`~neurips26.inference.adkv.ADKVConfig` and :class:`~neurips26.inference.adakvq.AdaKVQConfig`
  (all dataclass fields; no tensors).
- :class:`~neurips26.inference.adakvq.AADProfile` (what :func:`~neurips26.inference.adakvq.calibrate_aad`
  returns): ``mean``/``std`` ``Tensor[L]`` and the raw per-layer ``series`` (list of ``Tensor[n_l]``,
  lengths may differ, may be empty).
- The ADKV calibration product of :func:`~neurips26.inference.adkv.calibrate_adkv` (the ``params`` argument
  of :class:`~neurips26.inference.adkv.ADKVCache`): a ``dict`` ``layer_idx -> {"key": Tensor[kv_heads, 3,
  head_dim], "value": Tensor[kv_heads, 3, head_dim]}``, optionally with ``"key_outliers"``/
  ``"value_outliers"`` ``LongTensor[kv_heads, n_outliers]``; any subset of these names per layer.

File layout (one object per directory)
--------------------------------------
``config.json``
    ``{"type": <qualified class name>, "format_version": 1, "fields": {...}}``: the object's non-tensor
    fields (for a config, every dataclass field; for a tensor product, ``"tensors"``: the sorted names of
    its tensors). The calibration dict, which has no class, is typed
    ``"neurips26.inference.adkv.calibrate.calibrate_adkv"`` (the function that produces it).
``tensors.safetensors``
    Only for objects with tensors: every tensor, nested containers flattened with dotted keys
    (``"0.key"``, ``"0.value_outliers"``, ``"mean"``, ``"series.3"``), written with
    ``safetensors.torch.save_file``. Tensors come back bit for bit with their dtype and shape (on the
    CPU unless ``device`` is given).

Format version
--------------
``format_version`` is 1. A file with another version, an unknown ``type``, missing or extra fields or
tensors is refused with a ``ValueError`` naming what was expected; the loader never imports a class
named by the file, it only looks the name up among the four types above.

Example
-------
>>> params = calibrate_adkv(model, [ids], cfg)                       # doctest: +SKIP
>>> save_pretrained(cfg, "calib/config"); save_pretrained(params, "calib/params")  # doctest: +SKIP
>>> cache = ADKVCache(model.config, load_pretrained("calib/config"),
...                   params=load_pretrained("calib/params"))       # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import torch

from neurips26.inference.adakvq.aad import AADProfile
from neurips26.inference.adakvq.config import AdaKVQConfig
from neurips26.inference.adkv.quantizer import ADKVConfig

__all__ = ["save_pretrained", "load_pretrained", "config_to_dict", "config_from_dict"]

FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
TENSORS_FILE = "tensors.safetensors"

_CONFIGS: tuple[type, ...] = (ADKVConfig, AdaKVQConfig)
ADKV_PARAMS_TYPE = "neurips26.inference.adkv.calibrate.calibrate_adkv"
_ADKV_PARAM_NAMES = ("key", "value", "key_outliers", "value_outliers")


class MissingFileError(FileNotFoundError, ValueError):
    """A file of the layout is missing: a ``FileNotFoundError`` that is also a ``ValueError``."""


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


_TYPES: dict[str, Any] = {_qualname(c): c for c in (*_CONFIGS, AADProfile)}
_TYPES[ADKV_PARAMS_TYPE] = dict


def _known_types() -> str:
    return ", ".join(sorted(_TYPES))


# ------------------------------------------------------------------------------------------ configs


def _json_value(name: str, value: Any) -> Any:
    if isinstance(value, tuple):
        return [_json_value(name, v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"config field {name!r} holds a {type(value).__name__}, which config.json cannot store")


def config_to_dict(config: ADKVConfig | AdaKVQConfig) -> dict[str, Any]:
    """The ``config.json`` record of a config: ``{"type", "format_version", "fields"}`` (JSON-ready;
    tuples become lists)."""
    if not isinstance(config, _CONFIGS):
        names = ", ".join(c.__name__ for c in _CONFIGS)
        raise TypeError(f"config must be one of {names}, got {type(config).__name__}")
    fields = {f.name: _json_value(f.name, getattr(config, f.name)) for f in dataclasses.fields(config)}
    return {"type": _qualname(type(config)), "format_version": FORMAT_VERSION, "fields": fields}


def _check_record(record: Any, where: str) -> tuple[Any, dict[str, Any]]:
    """``(type, fields)`` of a record after checking its keys, version and type name."""
    if not isinstance(record, dict) or not {"type", "format_version", "fields"} <= set(record):
        raise ValueError(
            f"{where} must be a record with keys 'type', 'format_version', 'fields', got {record!r}"
        )
    version = record["format_version"]
    if isinstance(version, bool) or version != FORMAT_VERSION:
        raise ValueError(
            f"{where}: format_version must be {FORMAT_VERSION}, got {version!r} "
            "(written by another version of neurips26.inference.persistence)"
        )
    name = record["type"]
    if name not in _TYPES:
        raise ValueError(f"{where}: unknown type {name!r}; expected one of {_known_types()}")
    if not isinstance(record["fields"], dict):
        raise ValueError(f"{where}: 'fields' must be a JSON object, got {type(record['fields']).__name__}")
    return _TYPES[name], record["fields"]


def _check_field_names(where: str, kind: str, given: Any, expected: Any) -> None:
    missing, extra = sorted(set(expected) - set(given)), sorted(set(given) - set(expected))
    if missing or extra:
        raise ValueError(
            f"{where}: {kind} of the stored object do not match; missing {missing}, unexpected {extra}"
        )


def config_from_dict(record: dict[str, Any]) -> ADKVConfig | AdaKVQConfig:
    """The config described by a :func:`config_to_dict` record (every field must be present; the
    config's own checks validate the values)."""
    return _config_from_record(record, "record")


def _config_from_record(record: Any, where: str) -> ADKVConfig | AdaKVQConfig:
    cls, fields = _check_record(record, where)
    if cls not in _CONFIGS:
        raise ValueError(f"{where}: type {record['type']!r} is not a config; use load_pretrained for it")
    _check_field_names(where, "fields", fields, [f.name for f in dataclasses.fields(cls)])
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
    return cls(**values)


# ---------------------------------------------------------------------------------- tensor products


def _check_tensor(name: str, value: Any) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if value.is_meta:
        raise ValueError(f"{name} is a meta tensor (no data)")
    return value


def _flatten_adkv_params(params: dict) -> dict[str, torch.Tensor]:
    flat: dict[str, torch.Tensor] = {}
    for layer, entry in params.items():
        if isinstance(layer, bool) or not isinstance(layer, int) or layer < 0:
            raise TypeError(f"params keys must be layer indices (ints >= 0), got {layer!r}")
        if not isinstance(entry, dict):
            raise TypeError(f"params[{layer}] must be a dict of tensors, got {type(entry).__name__}")
        for name, value in entry.items():
            if name not in _ADKV_PARAM_NAMES:
                raise ValueError(f"params[{layer}] key {name!r} is not one of {list(_ADKV_PARAM_NAMES)}")
            flat[f"{layer}.{name}"] = _check_tensor(f"params[{layer}][{name!r}]", value)
    return flat


def _unflatten_adkv_params(flat: dict[str, torch.Tensor]) -> dict[int, dict[str, torch.Tensor]]:
    out: dict[int, dict[str, torch.Tensor]] = {}
    for key in sorted(
        flat, key=lambda k: (int(k.split(".", 1)[0]), _ADKV_PARAM_NAMES.index(k.split(".", 1)[1]))
    ):
        layer, name = key.split(".", 1)
        out.setdefault(int(layer), {})[name] = flat[key]
    return out


def _valid_adkv_key(key: str) -> bool:
    layer, _, name = key.partition(".")
    return layer.isdigit() and str(int(layer)) == layer and name in _ADKV_PARAM_NAMES


def _flatten(obj: Any) -> tuple[str, dict[str, Any], dict[str, torch.Tensor]]:
    """``(type name, non-tensor fields, flat tensors)`` of a supported object."""
    if isinstance(obj, _CONFIGS):
        record = config_to_dict(obj)
        return record["type"], record["fields"], {}
    if isinstance(obj, AADProfile):
        if not isinstance(obj.series, (list, tuple)):
            raise TypeError(f"obj.series must be a list of tensors, got {type(obj.series).__name__}")
        flat = {"mean": _check_tensor("obj.mean", obj.mean), "std": _check_tensor("obj.std", obj.std)}
        for i, s in enumerate(obj.series):
            flat[f"series.{i}"] = _check_tensor(f"obj.series[{i}]", s)
        return _qualname(AADProfile), {"num_series": len(obj.series)}, flat
    if isinstance(obj, dict):
        return ADKV_PARAMS_TYPE, {}, _flatten_adkv_params(obj)
    raise TypeError(
        "obj must be an ADKVConfig, an AdaKVQConfig, an AADProfile or the dict returned by calibrate_adkv, "
        f"got {type(obj).__name__}"
    )


def _directory(directory: Any) -> Path:
    if isinstance(directory, bool) or not isinstance(directory, (str, os.PathLike)):
        raise TypeError(f"directory must be a str or os.PathLike, got {type(directory).__name__}")
    return Path(directory)


def save_pretrained(obj: Any, directory: str | os.PathLike) -> Path:
    """Write ``obj`` to ``directory`` (created if needed): ``config.json`` and, for objects with tensors,
    ``tensors.safetensors``. Existing files of the layout are overwritten.

    Parameters
    ----------
    obj : ADKVConfig, AdaKVQConfig, AADProfile or dict
        The dict is :func:`~neurips26.inference.adkv.calibrate_adkv`'s product ``{layer_idx: {"key",
        "value"[, "key_outliers", "value_outliers"]: Tensor}}``.
    directory : str or os.PathLike

    Returns
    -------
    The directory as a ``Path``.
    """
    path = _directory(directory)
    type_name, fields, flat = _flatten(obj)
    if path.exists() and not path.is_dir():
        raise ValueError(f"directory must be a directory, but {str(path)!r} is a file")
    path.mkdir(parents=True, exist_ok=True)
    if not isinstance(obj, _CONFIGS):
        from safetensors.torch import save_file

        fields = {**fields, "tensors": sorted(flat)}
        # own contiguous CPU copies: safetensors refuses views and tensors sharing storage
        save_file(
            {k: v.detach().cpu().contiguous().clone() for k, v in flat.items()}, str(path / TENSORS_FILE)
        )
    record = {"type": type_name, "format_version": FORMAT_VERSION, "fields": fields}
    (path / CONFIG_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def load_pretrained(directory: str | os.PathLike, device: str | torch.device = "cpu") -> Any:
    """Read the object that :func:`save_pretrained` wrote to ``directory``.

    Parameters
    ----------
    directory : str or os.PathLike
    device : str or torch.device
        Where the tensors are loaded (default CPU; configs have none).

    Returns
    -------
    ADKVConfig, AdaKVQConfig, AADProfile or the ``calibrate_adkv`` dict ``{int: {str: Tensor}}`` (layers
    ascending, names in the order ``key, value, key_outliers, value_outliers``).

    Raises
    ------
    MissingFileError (a ``ValueError`` and a ``FileNotFoundError``) when a file of the layout is missing;
    ValueError for an unreadable file, another ``format_version``, an unknown ``type`` or fields/tensors
    that do not match the type.
    """
    path = _directory(directory)
    config_path = path / CONFIG_FILE
    if not config_path.is_file():
        raise MissingFileError(
            f"directory {str(path)!r} must hold {CONFIG_FILE} (written by save_pretrained)"
        )
    try:
        record = json.loads(config_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{str(config_path)!r} is not valid JSON: {err}") from None
    where = str(config_path)
    cls, fields = _check_record(record, where)
    if cls in _CONFIGS:
        return _config_from_record(record, where)
    names = fields.get("tensors")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{where}: fields['tensors'] must be the list of tensor names, got {names!r}")
    tensors_path = path / TENSORS_FILE
    if not tensors_path.is_file():
        raise MissingFileError(f"directory {str(path)!r} must hold {TENSORS_FILE} for a {record['type']}")
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        flat = load_file(
            str(tensors_path), device=str(device) if isinstance(device, torch.device) else device
        )
    except SafetensorError as err:
        raise ValueError(f"{str(tensors_path)!r} is not a readable safetensors file: {err}") from None
    _check_field_names(str(tensors_path), "tensor names", flat, names)
    if cls is AADProfile:
        _check_field_names(where, "fields", fields, ["num_series", "tensors"])
        n = fields["num_series"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"{where}: fields['num_series'] must be an int >= 0, got {n!r}")
        _check_field_names(where, "tensors", names, ["mean", "std", *(f"series.{i}" for i in range(n))])
        return AADProfile(flat["mean"], flat["std"], [flat[f"series.{i}"] for i in range(n)])
    _check_field_names(where, "fields", fields, ["tensors"])
    bad = [k for k in names if not _valid_adkv_key(k)]
    if bad:
        raise ValueError(
            f"{where}: tensor names must be '<layer>.<name>' with name in {list(_ADKV_PARAM_NAMES)}, got {bad}"
        )
    return _unflatten_adkv_params(flat)
