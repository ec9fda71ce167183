"""Tests of neurips26.inference.persistence: exact round trips of configs and calibration products,
caches built from reloaded products, and every error path."""

from __future__ import annotations

import dataclasses
import json
import math
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from neurips26.inference.adakvq import AADProfile, AADTracker, AdaKVQCache, AdaKVQConfig, calibrate_aad
from neurips26.inference.adakvq.aad import register_aad_attention
from neurips26.inference.adkv import ADKVCache, ADKVConfig, calibrate_adkv
from neurips26.inference.adkv.quantizer import ADKVState
from neurips26.inference.persistence import (
    CONFIG_FILE,
    FORMAT_VERSION,
    TENSORS_FILE,
    MissingFileError,
    config_from_dict,
    config_to_dict,
    load_pretrained,
    save_pretrained,
)

IO = settings(max_examples=40, deadline=None)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and bytes (NaN payloads and the sign of zero included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(
        a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)
    )  # same kernel: round trip


def _round_trip(obj):
    with tempfile.TemporaryDirectory() as d:
        save_pretrained(obj, Path(d) / "saved")
        return load_pretrained(Path(d) / "saved")


def _same_config(a, b) -> bool:
    return type(a) is type(b) and all(
        getattr(a, f.name) == getattr(b, f.name) and type(getattr(a, f.name)) is type(getattr(b, f.name))
        for f in dataclasses.fields(a)
    )


# ------------------------------------------------------------------------------------- exports


def test_names_import_through_the_area_index():
    import neurips26.inference.persistence as mod
    from neurips26.inference import config_from_dict as f2
    from neurips26.inference import config_to_dict as f1
    from neurips26.inference import load_pretrained as load
    from neurips26.inference import save_pretrained as save

    assert (save, load, f1, f2) == (
        mod.save_pretrained,
        mod.load_pretrained,
        mod.config_to_dict,
        mod.config_from_dict,
    )
    assert {"save_pretrained", "load_pretrained"} <= set(dir(__import__("neurips26.inference").inference))


# ------------------------------------------------------------------------------------- configs

unit_open = st.floats(0.0, 1.0, exclude_min=True, exclude_max=True)
adkv_configs = st.builds(
    ADKVConfig,
    bits=st.sampled_from([*range(1, 9), 16]),
    init_tokens=st.integers(1, 1 << 20),
    eta_z=unit_open,
    eta_s=unit_open,
    gamma=st.floats(0.0, exclude_min=True, allow_nan=False) | st.integers(1, 5),
    overload_up=st.floats(1.0, allow_nan=False),
    s_min_rel=unit_open,
    value_mode=st.sampled_from(["adkv", "per_token"]),
    value_group_size=st.integers(1, 256),
    residual_length=st.integers(0, 4096),
    storage=st.sampled_from(["packed", "simulated"]),
    n_outliers=st.integers(0, 64),
    checkpoint_every=st.none() | st.integers(1, 1000),
    decode_mode=st.sampled_from(["stream", "reference"]),
    levels=st.sampled_from(["midrise", "midtread"]),
    sink_tokens=st.integers(0, 8),
)


@IO
@given(adkv_configs)
def test_adkv_config_round_trip(cfg):
    loaded = _round_trip(cfg)
    assert _same_config(loaded, cfg)
    assert config_from_dict(json.loads(json.dumps(config_to_dict(cfg)))) == cfg


@st.composite
def adakvq_configs(draw):
    bits = tuple(draw(st.sets(st.sampled_from([1, 2, 3, 4, 8, 16]), min_size=1)))
    nonneg = st.floats(0.0, allow_nan=False)
    kw = dict(
        bits=bits,
        avg_bits=draw(st.floats(min(bits), max(bits))),
        kappa=draw(nonneg),
        kappa_hi=draw(nonneg),
        kappa_lo=draw(nonneg),
        ema=draw(st.floats(0.0, 1.0, exclude_max=True)),
        group_size=draw(st.integers(1, 128)),
        residual_length=draw(st.integers(0, 128)),
        value_group_size=draw(st.none() | st.integers(1, 64)),
        budget_slack=draw(nonneg),
        online=draw(st.booleans()),
        key_bonus=draw(st.integers(0, 3)),
    )
    try:
        return AdaKVQConfig(**kw)
    except ValueError:  # avg_bits below the cheapest rung for this key_bonus
        assume(False)


@IO
@given(adakvq_configs())
def test_adakvq_config_round_trip(cfg):
    loaded = _round_trip(cfg)
    assert _same_config(loaded, cfg) and isinstance(loaded.bits, tuple)


def test_config_record_layout(tmp_path):
    cfg = AdaKVQConfig(bits=(2, 4), avg_bits=3.0, value_group_size=None)
    save_pretrained(cfg, tmp_path)
    record = json.loads((tmp_path / CONFIG_FILE).read_text())
    assert record == config_to_dict(cfg)
    assert record["type"] == "neurips26.inference.adakvq.config.AdaKVQConfig"
    assert record["format_version"] == FORMAT_VERSION == 1
    assert record["fields"]["bits"] == [2, 4] and record["fields"]["value_group_size"] is None
    assert not (tmp_path / TENSORS_FILE).exists()  # configs have no tensors


# ---------------------------------------------------------------------------- tensor products

dtypes = st.sampled_from([torch.float32, torch.float64, torch.float16, torch.bfloat16])


@IO
@given(st.integers(0, 4), st.lists(st.integers(0, 6), max_size=5), dtypes, st.integers(0, 2**31 - 1))
def test_aad_profile_round_trip(n_layers, lengths, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    prof = AADProfile(
        torch.rand(n_layers, generator=g).to(dtype),
        torch.rand(n_layers, generator=g).to(dtype),
        [torch.rand(n, generator=g) for n in lengths],
    )
    loaded = _round_trip(prof)
    assert isinstance(loaded, AADProfile)
    assert _same(loaded.mean, prof.mean) and _same(loaded.std, prof.std)
    assert len(loaded.series) == len(prof.series)
    assert all(_same(a, b) for a, b in zip(loaded.series, prof.series))


def test_special_values_keep_their_bits():
    x = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 5e-324], dtype=torch.float64)
    loaded = _round_trip(AADProfile(x, x.flip(0), [x[:2]]))
    assert _same(loaded.mean, x) and _same(loaded.std, x.flip(0)) and _same(loaded.series[0], x[:2])


@st.composite
def adkv_params(draw):
    heads, dim = draw(st.integers(1, 3)), draw(st.integers(2, 8))
    n_out = draw(st.integers(0, dim - 1))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    params = {}
    for layer in draw(st.sets(st.integers(0, 40), max_size=4)):
        entry = {
            "key": torch.rand(heads, 3, dim, generator=g),
            "value": torch.rand(heads, 3, dim, generator=g),
        }
        if n_out:
            for name in ("key_outliers", "value_outliers"):
                entry[name] = torch.stack([torch.randperm(dim, generator=g)[:n_out] for _ in range(heads)])
        params[layer] = entry
    return params


@IO
@given(adkv_params())
def test_adkv_params_round_trip(params):
    loaded = _round_trip(params)
    assert type(loaded) is dict and list(loaded) == sorted(params)
    for layer, entry in params.items():
        assert set(loaded[layer]) == set(entry)
        assert all(_same(loaded[layer][k], v) for k, v in entry.items())


def test_views_and_partial_entries_round_trip(tmp_path):
    base = torch.arange(2 * 3 * 4 * 2, dtype=torch.float32).reshape(2, 3, 8)
    params = {3: {"value": base[:, :, ::2]}, 0: {}}  # a strided view, a layer left to the defaults
    save_pretrained(params, tmp_path)
    loaded = load_pretrained(tmp_path, device=torch.device("cpu"))
    assert list(loaded) == [3] and _same(loaded[3]["value"], base[:, :, ::2].contiguous())


# ----------------------------------------------------------------------- caches from reloaded products


def test_adkv_cache_from_reloaded_calibration_generates_the_same_tokens(tiny_llama, tmp_path):
    model = tiny_llama()
    ids = torch.randint(1, 64, (3, 24), generator=torch.Generator().manual_seed(16))
    cfg = ADKVConfig(bits=2, n_outliers=1, checkpoint_every=4)
    params = calibrate_adkv(model, [ids], cfg, steps=2, batch_size=3, n_query=8)
    save_pretrained(cfg, tmp_path / "config")
    save_pretrained(params, tmp_path / "params")
    cfg2, params2 = load_pretrained(tmp_path / "config"), load_pretrained(tmp_path / "params")
    assert cfg2 == cfg and set(params2) == set(params)
    assert all(_same(params2[i][k], v) for i in params for k, v in params[i].items())
    kw = dict(max_new_tokens=10, do_sample=False, output_scores=True, return_dict_in_generate=True)
    prompt = ids[:2, :12]
    a = model.generate(prompt, cache=ADKVCache(model.config, cfg, params=params), **kw)
    b = model.generate(prompt, cache=ADKVCache(model.config, cfg2, params=params2), **kw)
    assert torch.equal(a.sequences, b.sequences)  # same kernel: round trip
    assert all(torch.equal(x, y) for x, y in zip(a.scores, b.scores))  # same kernel: round trip


def test_adakvq_cache_from_reloaded_profile_generates_the_same_tokens(tiny_llama, tmp_path):
    model = tiny_llama()
    prompts = [torch.randint(1, 64, (1, 16), generator=torch.Generator().manual_seed(i)) for i in range(2)]
    prof = calibrate_aad(model, prompts, max_new_tokens=4, n_probe=8)
    q = AdaKVQConfig(bits=(2, 3, 4), avg_bits=3.0, group_size=4, residual_length=4)
    save_pretrained(prof, tmp_path / "profile")
    save_pretrained(q, tmp_path / "config")
    prof2, q2 = load_pretrained(tmp_path / "profile"), load_pretrained(tmp_path / "config")
    assert q2 == q and _same(prof2.mean, prof.mean) and _same(prof2.std, prof.std)
    model.set_attn_implementation(register_aad_attention(n_probe=8))
    ids = torch.randint(1, 64, (2, 20), generator=torch.Generator().manual_seed(3))
    runs = []
    for quant, profile in ((q, prof), (q2, prof2)):
        tracker = AADTracker()
        cache = AdaKVQCache(model.config, quant, profile, tracker)
        with tracker.active():
            out = model.generate(ids, max_new_tokens=10, do_sample=False, cache=cache)
        runs.append((out, cache.base_bits, cache.bits_log()))
    model.set_attn_implementation("sdpa")
    assert torch.equal(runs[0][0], runs[1][0])  # same kernel: round trip
    assert runs[0][1:] == runs[1][1:]


# ----------------------------------------------------------------------------------- errors


def _rewrite(path: Path, **changes) -> None:
    record = json.loads((path / CONFIG_FILE).read_text())
    record.update(changes)
    (path / CONFIG_FILE).write_text(json.dumps(record))


@pytest.mark.parametrize(
    "obj, match",
    [
        ([1, 2], "obj must be an ADKVConfig.*got list"),
        (torch.zeros(2), "obj must be .*got Tensor"),
        (ADKVState(torch.zeros(1), torch.zeros(1)), "got ADKVState"),
        ({"0": {"key": torch.zeros(1)}}, "params keys must be layer indices"),
        ({True: {}}, "params keys must be layer indices"),
        ({0: torch.zeros(1)}, r"params\[0\] must be a dict"),
        ({0: {"key": [1.0]}}, r"params\[0\]\['key'\] must be a torch.Tensor"),
        (AADProfile(torch.zeros(1), torch.zeros(1), [None]), r"obj.series\[0\] must be a torch.Tensor"),
    ],
)
def test_save_rejects_unsupported_objects(obj, match, tmp_path):
    with pytest.raises(TypeError, match=match):
        save_pretrained(obj, tmp_path)
    assert not (tmp_path / CONFIG_FILE).exists()


def test_save_argument_errors(tmp_path):
    with pytest.raises(ValueError, match="key 'scale' is not one of"):
        save_pretrained({0: {"scale": torch.zeros(1)}}, tmp_path)
    with pytest.raises(ValueError, match="meta tensor"):
        save_pretrained({0: {"key": torch.zeros(1, device="meta")}}, tmp_path)
    with pytest.raises(TypeError, match="directory must be a str or os.PathLike, got int"):
        save_pretrained(ADKVConfig(), 3)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="directory must be a directory"):
        save_pretrained(ADKVConfig(), tmp_path / "file")
    with pytest.raises(TypeError, match="config must be one of ADKVConfig, AdaKVQConfig, got AADProfile"):
        config_to_dict(AADProfile(torch.zeros(1), torch.zeros(1)))


def test_missing_files(tmp_path):
    for missing in (tmp_path / "nowhere", tmp_path):
        with pytest.raises(ValueError, match="must hold config.json") as err:
            load_pretrained(missing)
        assert isinstance(err.value, FileNotFoundError) and isinstance(err.value, MissingFileError)
    save_pretrained(AADProfile(torch.zeros(2), torch.ones(2)), tmp_path)
    (tmp_path / TENSORS_FILE).unlink()
    with pytest.raises(FileNotFoundError, match="must hold tensors.safetensors for a .*AADProfile"):
        load_pretrained(tmp_path)
    with pytest.raises(TypeError, match="directory must be a str or os.PathLike"):
        load_pretrained(None)


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"type": "neurips26.inference.adkv.quantizer.Unknown"}, "unknown type .*Unknown.*expected one of"),
        ({"type": "builtins.dict"}, "unknown type 'builtins.dict'"),
        ({"format_version": 2}, "format_version must be 1, got 2"),
        ({"format_version": True}, "format_version must be 1, got True"),
        ({"fields": []}, "'fields' must be a JSON object"),
    ],
)
def test_load_rejects_bad_records(changes, match, tmp_path):
    save_pretrained(ADKVConfig(), tmp_path)
    _rewrite(tmp_path, **changes)
    with pytest.raises(ValueError, match=match):
        load_pretrained(tmp_path)


def test_load_rejects_bad_files_and_fields(tmp_path):
    save_pretrained(ADKVConfig(), tmp_path)
    (tmp_path / CONFIG_FILE).write_text("{not json")
    with pytest.raises(ValueError, match="is not valid JSON"):
        load_pretrained(tmp_path)
    (tmp_path / CONFIG_FILE).write_text('{"type": "x"}')
    with pytest.raises(ValueError, match="must be a record with keys 'type', 'format_version', 'fields'"):
        load_pretrained(tmp_path)
    record = config_to_dict(ADKVConfig())
    for fields, err, match in (
        (
            {k: v for k, v in record["fields"].items() if k != "sink_tokens"},
            ValueError,
            r"missing \['sink_tokens'\]",
        ),
        ({**record["fields"], "extra": 1}, ValueError, r"unexpected \['extra'\]"),
        ({**record["fields"], "bits": 9}, ValueError, "bits must lie in"),
        ({**record["fields"], "init_tokens": "16"}, TypeError, "init_tokens must be an int"),
    ):
        (tmp_path / CONFIG_FILE).write_text(json.dumps({**record, "fields": fields}))
        with pytest.raises(err, match=match):
            load_pretrained(tmp_path)
        with pytest.raises(err, match=match):
            config_from_dict({**record, "fields": fields})


def test_load_rejects_bad_tensor_files(tmp_path):
    from safetensors.torch import save_file

    save_pretrained(AADProfile(torch.zeros(2), torch.ones(2), [torch.zeros(3)]), tmp_path)
    with pytest.raises(ValueError, match="is not a config; use load_pretrained"):
        config_from_dict(json.loads((tmp_path / CONFIG_FILE).read_text()))
    save_file({"mean": torch.zeros(2), "std": torch.ones(2)}, str(tmp_path / TENSORS_FILE))
    with pytest.raises(ValueError, match=r"tensor names .*missing \['series.0'\]"):
        load_pretrained(tmp_path)
    (tmp_path / TENSORS_FILE).write_bytes(b"garbage")
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        load_pretrained(tmp_path)
    save_pretrained(AADProfile(torch.zeros(2), torch.ones(2), [torch.zeros(3)]), tmp_path)
    _rewrite(tmp_path, fields={"num_series": 2, "tensors": ["mean", "series.0", "std"]})
    with pytest.raises(
        ValueError, match=r"tensors of the stored object do not match; missing \['series.1'\]"
    ):
        load_pretrained(tmp_path)
    _rewrite(tmp_path, fields={"num_series": -1, "tensors": ["mean", "series.0", "std"]})
    with pytest.raises(ValueError, match="num_series'\\] must be an int >= 0"):
        load_pretrained(tmp_path)
    _rewrite(tmp_path, fields={"num_series": 1})
    with pytest.raises(ValueError, match=r"fields\['tensors'\] must be the list of tensor names"):
        load_pretrained(tmp_path)
    save_pretrained({0: {"key": torch.zeros(1, 3, 2)}}, tmp_path)
    save_file({"0.scale": torch.zeros(1)}, str(tmp_path / TENSORS_FILE))
    _rewrite(tmp_path, fields={"tensors": ["0.scale"]})
    with pytest.raises(ValueError, match=r"tensor names must be '<layer>.<name>'.*\['0.scale'\]"):
        load_pretrained(tmp_path)
