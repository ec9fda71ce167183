"""``neurips26 bench``: interleaved timing, ratios, targets, the JSON it writes, the report section."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from neurips26.bench import Benchmark, run_bench, time_interleaved
from neurips26.bench import suites as S
from neurips26.bench.report import bench_markdown, bench_plot, load_bench, target_rows

SMALL = {
    "kv_decode": {"model": "tiny", "context": 64, "batch": 2},
    "adera_codec": {"numel": 4096},
    "adacal_prefill": {"tokens": 512},
    "archer_loss": {"tokens": 32, "batch": 2},
    "composed_generate": {"model": "tiny", "tokens": 96, "new_tokens": 3},
    "optim_step": {"hidden": 16, "batch": 8},
}


def test_interleaving_rotates_the_order_and_counts_every_call():
    calls = []
    arms = {a: (lambda a=a: calls.append(a)) for a in "abc"}
    out = time_interleaved(arms, repeats=3, warmup=1)
    assert calls[:3] == ["a", "b", "c"]  # warm-up
    assert calls[3:] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert all(v["repeats"] == 3 and v["min_s"] <= v["median_s"] <= v["max_s"] for v in out.values())


def test_interleaved_timing_sees_a_slower_arm():
    import time

    out = time_interleaved({"fast": lambda: None, "slow": lambda: time.sleep(0.01)}, repeats=3, warmup=0)
    assert out["slow"]["min_s"] >= 0.009 > out["fast"]["max_s"]


@pytest.mark.parametrize(
    ("arms", "repeats", "err"),
    [({}, 1, ValueError), ({"a": 3}, 1, TypeError), ({"a": lambda: None}, 0, ValueError)],
)
def test_interleaving_rejects_bad_input(arms, repeats, err):
    with pytest.raises(err, match="arms|repeats"):
        time_interleaved(arms, repeats)


@pytest.mark.parametrize("name", sorted(S.BENCHMARKS))
def test_every_benchmark_runs_its_arms_on_a_small_case(name):
    bench = S.BENCHMARKS[name]
    arms, extra = bench.setup(dict(SMALL[name]), 0)
    assert bench.reference in arms and len(arms) >= 2
    for arm, fn in arms.items():
        if arm != "flex_compiled":  # compiling takes minutes on CPU: tests/inference (slow) covers it
            fn()
    assert isinstance(extra, dict)
    assert set(bench.targets) <= set(arms) | set(extra.get("skipped", {}))
    for case in bench.cases(True) + bench.cases(False):
        assert bench.x in case
    assert all(c in bench.cases(False) for c in bench.cases(True))  # quick is a subset of full


def test_kv_decode_caches_hold_fewer_bytes_than_dynamic(monkeypatch):
    from neurips26.inference.quant import attention

    calls = []
    real = attention.attend_codes
    monkeypatch.setattr(attention, "attend_codes", lambda *a, **k: calls.append(1) or real(*a, **k))
    # 160 tokens: past the fp residual window, kivi2_g64 quantises whole groups of 64 tokens too
    arms, extra = S.BENCHMARKS["kv_decode"].setup({**SMALL["kv_decode"], "context": 160}, 0)
    kv = extra["kv_bytes"]
    assert set(S.KV_PEERS) <= set(arms) | set(extra["skipped"])  # every peer runs or says why not
    assert all(kv[a] < kv["dynamic"] for a in arms if a != "dynamic")
    assert all(extra["peak_bytes"][a] >= kv[a] > 0 for a in arms)
    assert extra["kv_bytes_ratio"]["dynamic"] == extra["peak_ratio"]["dynamic"] == 1.0
    assert {extra["attention"][a] for a in ("kivi2", "kivi2_g64", "adakvq", "adkv")} == {"kv_codes"}
    assert extra["attention"]["kivi2_dequant"] == "sdpa"
    n_layers = S._model("tiny").config.num_hidden_layers
    assert len(calls) == 4 * n_layers  # the peak-memory step of kivi2, kivi2_g64, adakvq and adkv ran on the codes
    assert kv["kivi2_g64"] < kv["kivi2"]  # half the scales and zeros
    calls.clear()
    arms["kivi2"]()
    arms["kivi2_dequant"]()
    assert len(calls) == n_layers


def test_kv_decode_adakvq_arm_mixes_bit_widths():
    bits = S._adakvq_bits(30)
    assert len(set(bits)) >= 2 and sum(bits) / 30 <= 2.5


def test_codec_benchmark_is_bitwise_exact():
    from neurips26.distributed.adera import decode_payload, encode_shard, exponents

    x = (torch.randn(4096, generator=torch.Generator().manual_seed(0)) * 0.02).to(torch.bfloat16)
    cache = exponents(x).clone()
    out = cache.clone()
    got = decode_payload(encode_shard(x, cache), out)
    assert torch.equal(got.view(torch.int16), x.view(torch.int16))  # same kernel: lossless codec, bit patterns


def _fake(monkeypatch, targets=None):
    fake = Benchmark(
        "fake", "fake", "ref",
        lambda quick: [{"n": 1}] if quick else [{"n": 1}, {"n": 2}],
        lambda case, seed: ({"ref": lambda: None, "m": lambda: sum(range(2000 * case["n"]))}, {"n": case["n"]}),
        "n", targets=targets or {"m": (1e9, 2)}, repeats=(2, 3),
    )  # fmt: skip
    monkeypatch.setitem(S.BENCHMARKS, "fake", fake)
    return fake


def test_run_bench_writes_json_with_ratios_targets_env_and_commit(tmp_path, monkeypatch):
    _fake(monkeypatch)
    res = run_bench("fake", threads=(1, 2), out=tmp_path)
    data = json.loads((tmp_path / "bench" / "fake.json").read_text())
    assert data["rows"] == json.loads(json.dumps(res["rows"]))
    assert [(r["threads"], r["case"]["n"]) for r in data["rows"]] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    for r in data["rows"]:
        assert r["ratio"]["ref"] == 1.0
        assert r["ratio"]["m"] == pytest.approx(r["timing"]["m"]["median_s"] / r["timing"]["ref"]["median_s"])
        assert r["timing"]["m"]["repeats"] == 3
    t = data["targets"]["m"]
    assert t["met"] is True and t["at"] == {"threads": 2, "n": 2}
    assert "torch" in json.dumps(data["env"]) and "commit" in data["provenance"]


def test_several_targets_per_arm_and_extra_conditions(monkeypatch):
    fake = _fake(monkeypatch, targets={"m": [(1e9, 2, {"n": 1.5}), (1e9, 1)]})
    res = run_bench("fake", threads=(1,), write=False)
    assert res["targets"]["m"]["met"] is False and res["targets"]["m"]["measured_n"] == 2  # extra n = 2 > 1.5
    assert res["targets"]["m@1"]["met"] is True and res["targets"]["m@1"]["arm"] == "m"
    rows = target_rows({"name": fake.name, "x": "n", "targets": res["targets"]})
    assert "n <= 1.5" in rows[0][2] and rows[1][1] == "m@1"


def test_quick_run_without_the_target_case_says_so(tmp_path, monkeypatch):
    _fake(monkeypatch, targets={"m": (1e-12, 2)})
    res = run_bench("fake", quick=True, threads=(1,), write=False)
    assert res["targets"]["m"]["met"] is None
    res = run_bench("fake", threads=(1,), write=False)
    assert res["targets"]["m"]["met"] is False  # an impossible target is reported missed, not hidden


def test_run_bench_rejects_bad_input(monkeypatch):
    _fake(monkeypatch)
    with pytest.raises(ValueError, match="name"):
        run_bench("nope", write=False)
    with pytest.raises(ValueError, match="threads"):
        run_bench("fake", threads=(), write=False)
    with pytest.raises(ValueError, match="threads"):
        run_bench("fake", threads=(0,), write=False)
    bad = dataclasses.replace(S.BENCHMARKS["fake"], reference="missing")
    monkeypatch.setitem(S.BENCHMARKS, "fake", bad)
    with pytest.raises(RuntimeError, match="reference"):
        run_bench("fake", threads=(1,), write=False)


def test_report_section_lists_ratios_targets_and_a_plot(tmp_path, monkeypatch):
    _fake(monkeypatch, targets={"m": (1e-12, 2)})
    run_bench("fake", threads=(1,), out=tmp_path)
    items = [(d, bench_plot(d, tmp_path / "plots")) for d in load_bench(tmp_path / "bench")]
    assert len(items) == 1 and items[0][1].exists()
    md = bench_markdown(items, tmp_path)
    assert "## Performance" in md and "m / ref" in md and "missed" in md
    assert target_rows(items[0][0])[0][-1] == "missed"


def test_cli_bench_runs_and_prints_targets(tmp_path, monkeypatch, capsys):
    from neurips26.cli import main

    _fake(monkeypatch)
    assert main(["bench", "fake", "--threads", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "target m <=" in out and (tmp_path / "bench" / "fake.json").exists()
    with pytest.raises(SystemExit, match="unknown benchmark"):
        main(["bench", "nope"])
    with pytest.raises(SystemExit, match="threads"):
        main(["bench", "fake", "--threads", "x"])


def test_where_keeps_only_the_named_cases_and_records_the_filter(tmp_path, monkeypatch):
    _fake(monkeypatch)
    res = run_bench("fake", threads=(1,), out=tmp_path, where={"n": [2]})
    assert [r["case"]["n"] for r in res["rows"]] == [2]
    assert json.loads((tmp_path / "bench" / "fake.json").read_text())["where"] == {"n": [2]}
    res = run_bench("fake", threads=(1,), write=False, where={"n": [1]})
    assert (
        res["targets"]["m"]["met"] is None
    )  # the target's case (n=2) was filtered out: not measured, not met
    assert run_bench("fake", threads=(1,), write=False)["where"] is None


@pytest.mark.parametrize(
    "where, err",
    [({"nope": [1]}, ValueError), ({"n": [3]}, ValueError), ({"n": []}, ValueError), ({"n": "2"}, ValueError),
     ([("n", [1])], TypeError)],
)  # fmt: skip
def test_where_rejects_bad_filters(monkeypatch, where, err):
    _fake(monkeypatch)
    with pytest.raises(err, match="where"):
        run_bench("fake", threads=(1,), write=False, where=where)


def test_cli_bench_where(tmp_path, monkeypatch, capsys):
    from neurips26.cli import main

    _fake(monkeypatch)
    assert main(["bench", "fake", "--threads", "1", "--out", str(tmp_path), "--where", "n=2"]) == 0
    assert [r["case"]["n"] for r in json.loads((tmp_path / "bench" / "fake.json").read_text())["rows"]] == [2]
    with pytest.raises(SystemExit, match="KEY=V1"):
        main(["bench", "fake", "--where", "n"])
    with pytest.raises(SystemExit, match="unknown case key"):
        main(["bench", "fake", "--threads", "1", "--where", "zz=1", "--out", str(tmp_path)])


def test_readme_performance_table_names_a_filtered_run(tmp_path, monkeypatch):
    from neurips26.readme import performance_table

    _fake(monkeypatch)
    run_bench("fake", threads=(1,), out=tmp_path, where={"n": [1]})
    table = performance_table(tmp_path / "bench")
    assert "| fake | full (n 1) | m |" in table and "not in this run" in table
