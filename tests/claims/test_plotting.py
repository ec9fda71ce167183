"""Shared plot saving (``neurips26.claims.plotting``) and every claim's plot hook on its committed result."""

import json
import math
from pathlib import Path

import pytest
from PIL import Image

from neurips26.claims.plotting import pyplot, save_figure
from neurips26.registry import load_claim

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
RESULTS = Path(__file__).resolve().parents[2] / "results" / "full"

# File names each hook writes from its committed full-profile result, recorded from the hooks before
# they were moved onto save_figure (the report links these names). adakvq and adacal are left out on
# purpose: their claims are being changed elsewhere.
HOOK_FILES = {
    "accelegrad_sharp": {
        "accelegrad_sharp_quadratic_gap.png",
        "accelegrad_sharp_mnist_train_loss.png",
        "accelegrad_sharp_lm_train_loss.png",
    },
    "adera": {"adera_training.png"},
    "adkv": {"adkv_accuracy_metadata.png"},
    "ancre": {
        "ancre_e1_train_loss.png",
        "ancre_e2_train_loss.png",
        "ancre_e1_learned_topology.png",
        "ancre_e2_learned_topology.png",
    },
    "aot_pot": {"aot_pot_train_loss.png", "aot_pot_per_family.png"},
    "archer": {"archer_reward.png", "archer_entropy.png", "archer_clipfrac_reasoning.png"},
    "asap": {"asap_traces.png", "asap_rule_attack_heatmap.png"},
    "fedrevive": {"fedrevive_accuracy_time.png"},
    "gcn_mlp": {"gcn_mlp_accuracy_efficiency.png"},
    "invgnn_wm": {"invgnn_wm_prune.png", "invgnn_wm_null.png"},
    "sgnnbench": {"sgnnbench_accuracy_energy.png"},
}


def _figure(plt, size=(2.0, 1.0)):
    fig, ax = plt.subplots(figsize=size)
    ax.plot([0, 1, 2], [2, 0, 1], label="curve")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title("title")
    return fig, ax


def _assert_png(path: Path) -> tuple[int, int]:
    assert path.is_file()
    assert path.read_bytes()[:8] == PNG_MAGIC
    with Image.open(path) as img:
        img.verify()
    with Image.open(path) as img:
        assert img.format == "PNG"
        return img.size


def test_pyplot_selects_agg():
    import matplotlib
    import matplotlib.pyplot as mpl_pyplot

    plt = pyplot()
    assert plt is mpl_pyplot
    assert matplotlib.get_backend().lower() == "agg"


def test_save_figure_writes_png_closes_and_lays_out(tmp_path):
    plt = pyplot()
    fig, ax = _figure(plt, size=(2.0, 1.0))
    before_pos = ax.get_position().bounds
    open_before = plt.get_fignums()
    assert fig.number in open_before
    folder = tmp_path / "a" / "b"  # missing parents are created
    path = save_figure(fig, folder, "demo_curve", dpi=50)
    assert path == folder / "demo_curve.png"
    assert isinstance(path, Path)
    assert _assert_png(path) == (100, 50)  # figsize (2, 1) inches at 50 dpi
    assert fig.number not in plt.get_fignums()
    assert len(plt.get_fignums()) == len(open_before) - 1
    assert ax.get_position().bounds != before_pos  # tight_layout moved the axes to fit the labels


def test_save_figure_default_dpi_str_folder_and_overwrite(tmp_path):
    plt = pyplot()
    fig, _ = _figure(plt, size=(1.5, 1.0))
    first = save_figure(fig, str(tmp_path), "x")
    assert first == tmp_path / "x.png"
    assert _assert_png(first) == (150, 100)  # default dpi 100
    fig, _ = _figure(plt, size=(1.0, 1.0))
    second = save_figure(fig, tmp_path, "x", dpi=20.0)
    assert second == first
    assert _assert_png(second) == (20, 20)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"name": ""}, ValueError, "name must be a non-empty"),
        ({"name": " x"}, ValueError, "name must be a non-empty"),
        ({"name": "a/b"}, ValueError, "path separator"),
        ({"name": "a\\b"}, ValueError, "path separator"),
        ({"name": ".."}, ValueError, "path separator"),
        ({"name": "plot.png"}, ValueError, r"name is the file stem"),
        ({"name": 3}, TypeError, "name must be a str"),
        ({"name": None}, TypeError, "name must be a str"),
        ({"folder": None}, TypeError, "folder must be a str or os.PathLike"),
        ({"folder": ""}, ValueError, "folder must be a non-empty path"),
        ({"dpi": 0}, ValueError, "dpi must lie in"),
        ({"dpi": -5}, ValueError, "dpi must lie in"),
        ({"dpi": math.inf}, ValueError, "dpi must be finite"),
        ({"dpi": math.nan}, ValueError, "dpi must not be NaN"),
        ({"dpi": "100"}, TypeError, "dpi must be a real number"),
        ({"dpi": True}, TypeError, "dpi must be a real number"),
    ],
)
def test_save_figure_bad_arguments(tmp_path, kwargs, error, match):
    plt = pyplot()
    fig, _ = _figure(plt)
    args = {"folder": tmp_path / "out", "name": "ok", "dpi": 100, **kwargs}
    try:
        with pytest.raises(error, match=match):
            save_figure(fig, **args)
        assert not (tmp_path / "out").exists()  # nothing written
        assert fig.number in plt.get_fignums()  # the caller's figure is left open
    finally:
        plt.close(fig)


def test_save_figure_rejects_non_figure(tmp_path):
    plt = pyplot()
    fig, ax = _figure(plt)
    try:
        with pytest.raises(TypeError, match="fig must be a matplotlib.figure.Figure, got Axes"):
            save_figure(ax, tmp_path, "x")
        with pytest.raises(TypeError, match="fig must be a matplotlib.figure.Figure, got NoneType"):
            save_figure(None, tmp_path, "x")
    finally:
        plt.close(fig)
    assert list(tmp_path.iterdir()) == []


def test_save_figure_closes_the_figure_when_writing_fails(tmp_path):
    plt = pyplot()
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    fig, _ = _figure(plt)
    with pytest.raises(FileExistsError):
        save_figure(fig, blocker, "x")
    assert fig.number not in plt.get_fignums()


@pytest.mark.parametrize("slug", sorted(HOOK_FILES))
def test_claim_plot_hook_on_committed_result(tmp_path, slug):
    source = RESULTS / f"{slug}.json"
    if not source.is_file():
        pytest.skip(f"results/full/{slug}.json is not committed")
    result = json.loads(source.read_text())
    hook = load_claim(slug).plot
    assert hook is not None, f"{slug} lost its plot hook"
    plt = pyplot()
    open_before = set(plt.get_fignums())
    folder = tmp_path / "plots" / slug  # does not exist yet: the hook must create it
    paths = [Path(p) for p in hook(result, folder)]
    assert set(plt.get_fignums()) == open_before  # every figure the hook opened is closed
    assert [p.name for p in paths] and len({p.name for p in paths}) == len(paths)
    assert {p.name for p in paths} == HOOK_FILES[slug]
    assert {p.name for p in folder.iterdir()} == HOOK_FILES[slug]  # nothing else written
    for path in paths:
        assert path.parent == folder
        width, height = _assert_png(path)
        assert width > 0 and height > 0
