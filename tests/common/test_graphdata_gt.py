"""Tests for the graph-tool ``.gt`` reader: hand-built files (both byte orders, every value kind, error
paths) and, where Debian's python3-graph-tool collection files are present, the real networks with
the node/edge counts graph-tool documents for them."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest
import torch

from neurips26.common.graphdata_gt import (
    COLLECTION_DIRS,
    MAGIC,
    GTGraph,
    find_collection_file,
    gt_to_data,
    load_collection,
    read_gt,
)


def _u64(v: int, end: str) -> bytes:
    return struct.pack(end + "Q", v)


def _str(s: bytes, end: str) -> bytes:
    return _u64(len(s), end) + s


def _tiny(end: str = "<", directed: bool = False, extra: bytes = b"", nprops: int | None = None) -> bytes:
    """4 nodes, edges 0-1, 0-2, 2-3 (undirected, each once), with vertex/edge/graph properties."""
    out = MAGIC + bytes([1, 1 if end == ">" else 0]) + _str(b"hand-made", end)
    out += bytes([1 if directed else 0]) + _u64(4, end)
    adjacency = {0: [1, 2], 1: [], 2: [3], 3: []}
    for v in range(4):
        out += _u64(len(adjacency[v]), end) + bytes(adjacency[v])  # N <= 256: 1-byte indices
    props = [
        bytes([1])
        + _str(b"value", end)
        + bytes([0x02])
        + struct.pack(end + "4i", 5, 7, 5, 9),  # vertex int32
        bytes([1])
        + _str(b"name", end)
        + bytes([0x06])
        + b"".join(_str(n, end) for n in (b"a", b"b", b"c", b"d")),
        bytes([2])
        + _str(b"weight", end)
        + bytes([0x04])
        + struct.pack(end + "3d", 0.5, 1.5, 2.5),  # edge double
        bytes([1])
        + _str(b"pos", end)
        + bytes([0x0B])
        + b"".join(_u64(2, end) + struct.pack(end + "2d", i, -i) for i in range(4)),  # vector<double>
        bytes([0]) + _str(b"readme", end) + bytes([0x06]) + _str(b"tiny", end),  # graph string
    ]
    out += _u64(len(props) if nprops is None else nprops, end) + b"".join(props)
    return out + extra


@pytest.mark.parametrize("end", ["<", ">"])
def test_reads_hand_built_file_in_both_byte_orders(end):
    g = read_gt(_tiny(end))
    assert isinstance(g, GTGraph) and not g.directed and g.num_nodes == 4 and g.num_edges == 3
    assert g.edges.tolist() == [[0, 1], [0, 2], [2, 3]]
    assert g.vertex_properties["value"].tolist() == [5, 7, 5, 9]
    assert g.vertex_properties["name"] == ["a", "b", "c", "d"]
    assert g.edge_properties["weight"].tolist() == [0.5, 1.5, 2.5]
    assert g.vertex_properties["pos"][3] == [3.0, -3.0]
    assert g.graph_properties["readme"] == "tiny" and g.comment == "hand-made"


def test_gzip_and_path_input_and_conversion(tmp_path):
    path = tmp_path / "tiny.gt.gz"
    path.write_bytes(gzip.compress(_tiny()))
    data = gt_to_data(read_gt(path), label="value")
    # undirected: both directions, sorted; classes = sorted distinct values 5, 7, 9
    assert data.edge_index.tolist() == [[0, 0, 1, 2, 2, 3], [1, 2, 0, 0, 3, 2]]
    assert data.y.tolist() == [0, 1, 0, 2] and data.num_classes == 3 and data.class_values == [5, 7, 9]
    assert torch.equal(data.x, torch.eye(4))  # same kernel: one-hot features equal the constant eye
    assert gt_to_data(read_gt(path), label=None, features=None).x is None


def test_string_labels_become_sorted_classes():
    data = gt_to_data(read_gt(_tiny()), label="name", features=None)
    assert data.y.tolist() == [0, 1, 2, 3] and data.class_values == ["a", "b", "c", "d"]


def test_directed_keeps_direction_when_asked():
    data = gt_to_data(read_gt(_tiny(directed=True)), label=None, undirected=False)
    assert data.edge_index.tolist() == [[0, 0, 2], [1, 2, 3]]


def test_bad_files_raise_value_errors(tmp_path):
    with pytest.raises(ValueError, match="magic"):
        read_gt(b"not a gt file at all")
    bad_version = bytearray(_tiny())
    bad_version[6] = 2
    with pytest.raises(ValueError, match="version"):
        read_gt(bytes(bad_version))
    with pytest.raises(ValueError, match="truncated"):
        read_gt(_tiny()[:-5])
    with pytest.raises(ValueError, match="trailing"):
        read_gt(_tiny(extra=b"\x00"))
    with pytest.raises(ValueError, match="truncated"):
        read_gt(_tiny(nprops=6))
    out_of_range = bytearray(_tiny())
    idx = out_of_range.index(bytes([2, 0, 0, 0, 0, 0, 0, 0, 1, 2]))  # vertex 0: 2 neighbours, 1 and 2
    out_of_range[idx + 9] = 7
    with pytest.raises(ValueError, match="neighbour 7"):
        read_gt(bytes(out_of_range))
    with pytest.raises(FileNotFoundError, match="path"):
        read_gt(tmp_path / "missing.gt")
    with pytest.raises(TypeError, match="path"):
        read_gt(3)
    g = read_gt(_tiny())
    with pytest.raises(ValueError, match="label"):
        gt_to_data(g, label="colour")
    with pytest.raises(ValueError, match="features"):
        gt_to_data(g, features="degree")
    with pytest.raises(TypeError, match="graph"):
        gt_to_data("g")


def test_find_collection_file_reports_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.delenv("NEURIPS26_GT_COLLECTION", raising=False)
    with pytest.raises(FileNotFoundError, match="python3-graph-tool"):
        find_collection_file("polblogs", dirs=(str(tmp_path),))
    (tmp_path / "tiny.gt.gz").write_bytes(gzip.compress(_tiny()))
    monkeypatch.setenv("NEURIPS26_GT_COLLECTION", str(tmp_path))
    assert find_collection_file("tiny", dirs=()) == tmp_path / "tiny.gt.gz"
    with pytest.raises(ValueError, match="name"):
        find_collection_file("../etc")


def _have(name: str) -> bool:
    try:
        find_collection_file(name)
        return True
    except FileNotFoundError:
        return False


# Counts as graph-tool's collection documents them (``graph_tool.collection`` table and each file's header).
REAL = {
    "polblogs": (1490, 19090, True, 2, [758, 732]),
    "polbooks": (105, 441, False, 3, [49, 43, 13]),
    "football": (115, 613, False, 12, None),
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_collection_files(name):
    if not _have(name):
        pytest.skip(f"{name}.gt.gz not installed (Debian python3-graph-tool; searched {COLLECTION_DIRS})")
    n, e, directed, classes, counts = REAL[name]
    g = read_gt(find_collection_file(name))
    assert (g.num_nodes, g.num_edges, g.directed) == (n, e, directed)
    assert f"{n} vertices, {e} edges" in g.comment
    data = load_collection(name)
    assert data.num_nodes == n and data.num_classes == classes and data.x.shape == (n, n)
    if counts is not None:
        assert torch.bincount(data.y).tolist() == counts
    ei = data.edge_index
    assert bool((ei[0] != ei[1]).all())  # self-loops dropped
    assert ei.size(1) % 2 == 0 and int(ei.max()) < n
    # symmetric: every (u, v) has its (v, u)
    pairs = set(map(tuple, ei.t().tolist()))
    assert all((v, u) in pairs for u, v in pairs)
    if name == "football":
        assert np.array_equal(np.sort(np.unique(g.vertex_properties["value"])), np.arange(12))
