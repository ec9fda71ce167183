"""Reader for graph-tool's binary ``.gt`` format (and its gzip form) returning PyG ``Data``.

Why: Debian's ``python3-graph-tool`` package ships real, labelled networks (``polblogs``,
``polbooks``, ``football``, ``karate``, ...) as ``graph_tool/collection/<name>.gt.gz``. graph-tool
itself (a C++ extension with ~95 Debian dependencies) is not needed to read them: the format is a
short, documented binary layout (graph-tool documentation, "The gt file format"), written out here
from that description.

Layout (all integers in the file's endianness, given by its header)
------------------------------------------------------------------
- magic ``e2 9b be 20 67 74`` (UTF-8 "⛾ gt"), version byte (``1``), endianness byte
  (``0`` little, ``1`` big);
- comment string (``uint64`` length + bytes);
- directed flag (1 byte), ``N = uint64`` vertices, then for each vertex ``v = 0..N-1`` its
  out-neighbour list: ``uint64`` length + indices of ``d`` bytes each, ``d`` the smallest of
  1, 2, 4, 8 that holds ``N - 1`` (each undirected edge appears once);
- ``uint64`` number of property maps, each: key type byte (``0`` graph, ``1`` vertex, ``2`` edge),
  name string, value type byte (table :data:`VALUE_TYPES`), then one value (graph), ``N`` values
  (vertex, in index order) or ``E`` values (edge, in adjacency order).

Public entry points: :func:`read_gt` (any ``.gt``/``.gt.gz`` file -> :class:`GTGraph`),
:func:`gt_to_data` (-> ``torch_geometric.data.Data`` with a vertex property as class labels),
:func:`find_collection_file` and :func:`load_collection` (the Debian-shipped networks).

Shapes
------
:func:`gt_to_data`: ``edge_index [2, E']`` int64 (undirected: both directions, deduplicated, self-loops
dropped), ``y [N]`` int64 class ids, ``x [N, N]`` identity features unless ``features=None``.
"""

from __future__ import annotations

import gzip
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = [
    "MAGIC",
    "VALUE_TYPES",
    "GTGraph",
    "read_gt",
    "gt_to_data",
    "COLLECTION_DIRS",
    "COLLECTION_LABELS",
    "find_collection_file",
    "load_collection",
]

MAGIC = b"\xe2\x9b\xbe gt"

# value-type index -> (name, numpy scalar code or None for variable-length kinds)
VALUE_TYPES: dict[int, tuple[str, str | None]] = {
    0x00: ("bool", "u1"),
    0x01: ("int16", "i2"),
    0x02: ("int32", "i4"),
    0x03: ("int64", "i8"),
    0x04: ("double", "f8"),
    0x05: ("long double", None),
    0x06: ("string", None),
    0x07: ("vector<bool>", "u1"),
    0x08: ("vector<int16>", "i2"),
    0x09: ("vector<int32>", "i4"),
    0x0A: ("vector<int64>", "i8"),
    0x0B: ("vector<double>", "f8"),
    0x0C: ("vector<long double>", None),
    0x0D: ("vector<string>", None),
    0x0E: ("python::object", None),
}
_KEY_TYPES = {0: "graph", 1: "vertex", 2: "edge"}

# Where the Debian package puts the files, plus an override and a per-user cache (for a copy extracted
# with ``apt-get download python3-graph-tool && dpkg-deb -x`` without installing graph-tool).
COLLECTION_DIRS: tuple[str, ...] = (
    "/usr/lib/python3/dist-packages/graph_tool/collection",
    "~/.cache/neurips26/graph_tool_collection",
)
# Default class-label vertex property per collection network.
COLLECTION_LABELS = {"polblogs": "value", "polbooks": "value", "football": "value"}


@dataclass
class GTGraph:
    """A graph read from a ``.gt`` file.

    Attributes
    ----------
    directed : bool
    num_nodes : int
    edges : numpy.ndarray
        ``[E, 2]`` int64 ``(source, target)`` in file order (each undirected edge once).
    graph_properties, vertex_properties, edge_properties : dict
        Name -> value (graph), ``[N]`` array or list (vertex), ``[E]`` array or list (edge). Fixed-size
        numeric types become numpy arrays; strings, vectors and long doubles become lists (long doubles
        as raw 16-byte ``bytes``; python objects as their pickled ``bytes``, never unpickled).
    comment : str
    """

    directed: bool
    num_nodes: int
    edges: np.ndarray
    graph_properties: dict[str, Any] = field(default_factory=dict)
    vertex_properties: dict[str, Any] = field(default_factory=dict)
    edge_properties: dict[str, Any] = field(default_factory=dict)
    comment: str = ""

    @property
    def num_edges(self) -> int:
        return int(self.edges.shape[0])


class _Reader:
    def __init__(self, buf: bytes, where: str) -> None:
        self.buf, self.pos, self.where, self.end = buf, 0, where, "<"

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise ValueError(
                f"{self.where}: truncated .gt data (need {n} bytes at offset {self.pos}, file has {len(self.buf)})"
            )
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def u64(self) -> int:
        return struct.unpack(self.end + "Q", self.take(8))[0]

    def array(self, code: str, count: int) -> np.ndarray:
        dt = np.dtype(code).newbyteorder(self.end)
        return np.frombuffer(self.take(dt.itemsize * count), dtype=dt).astype(dt.newbyteorder("="))

    def string(self) -> bytes:
        return self.take(self.u64())

    def value_block(self, vtype: int, count: int) -> Any:
        name, code = VALUE_TYPES[vtype]
        if vtype <= 0x04:  # fixed-size scalars
            arr = self.array(code, count)
            return arr.astype(bool) if vtype == 0x00 else arr
        out: list[Any] = []
        for _ in range(count):
            if vtype == 0x05:
                out.append(self.take(16))
            elif vtype in (0x06, 0x0E):
                raw = self.string()
                out.append(raw if vtype == 0x0E else raw.decode("utf-8", errors="replace"))
            elif vtype == 0x0C:
                out.append([self.take(16) for _ in range(self.u64())])
            elif vtype == 0x0D:
                out.append([self.string().decode("utf-8", errors="replace") for _ in range(self.u64())])
            else:  # numeric vectors
                arr = self.array(code, self.u64())
                out.append((arr.astype(bool) if vtype == 0x07 else arr).tolist())
        return out


def _index_code(num_nodes: int) -> str:
    for code, limit in (("u1", 1 << 8), ("u2", 1 << 16), ("u4", 1 << 32)):
        if num_nodes <= limit:
            return code
    return "u8"


def read_gt(path: str | os.PathLike | bytes) -> GTGraph:
    """Parse a graph-tool ``.gt`` file (gzip-compressed when it starts with the gzip magic).

    Parameters
    ----------
    path : str, PathLike or bytes
        A file path or the raw (possibly gzipped) bytes.

    Returns
    -------
    GTGraph

    Raises
    ------
    FileNotFoundError
        The path does not exist.
    ValueError
        Not a ``.gt`` file (bad magic or version), truncated data, an out-of-range neighbour
        index, an unknown key/value type, or trailing bytes after the last property map.
    TypeError
        ``path`` is neither a path nor bytes.
    """
    if isinstance(path, (bytes, bytearray)):
        raw, where = bytes(path), "<bytes>"
    elif isinstance(path, (str, os.PathLike)):
        p = Path(path).expanduser()
        if not p.is_file():
            raise FileNotFoundError(f"path: no .gt file at {p}")
        raw, where = p.read_bytes(), str(p)
    else:
        raise TypeError(f"path must be a path or bytes, got {type(path).__name__}")
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    r = _Reader(raw, where)
    if r.take(6) != MAGIC:
        raise ValueError(f"{where}: not a graph-tool .gt file (magic bytes differ)")
    version = r.u8()
    if version != 1:
        raise ValueError(f"{where}: unsupported .gt version {version} (this reader knows version 1)")
    big = r.u8()
    if big not in (0, 1):
        raise ValueError(f"{where}: endianness byte must be 0 or 1, got {big}")
    r.end = ">" if big else "<"
    comment = r.string().decode("utf-8", errors="replace")
    directed = bool(r.u8())
    n = r.u64()
    code = _index_code(n)
    src, dst = [], []
    for v in range(n):
        k = r.u64()
        nbrs = r.array(code, k).astype(np.int64)
        if k and int(nbrs.max()) >= n:
            raise ValueError(f"{where}: vertex {v} lists neighbour {int(nbrs.max())} >= num_nodes {n}")
        src.append(np.full(k, v, dtype=np.int64))
        dst.append(nbrs)
    edges = np.stack([np.concatenate(src), np.concatenate(dst)], 1) if n else np.zeros((0, 2), dtype=np.int64)
    g = GTGraph(directed=directed, num_nodes=int(n), edges=edges, comment=comment)
    counts = {0: 1, 1: g.num_nodes, 2: g.num_edges}
    for _ in range(r.u64()):
        key = r.u8()
        if key not in _KEY_TYPES:
            raise ValueError(f"{where}: unknown property key type {key} (0 graph, 1 vertex, 2 edge)")
        name = r.string().decode("utf-8", errors="replace")
        vtype = r.u8()
        if vtype not in VALUE_TYPES:
            raise ValueError(f"{where}: property {name!r} has unknown value type {vtype}")
        values = r.value_block(vtype, counts[key])
        if key == 0:
            g.graph_properties[name] = values[0]
        elif key == 1:
            g.vertex_properties[name] = values
        else:
            g.edge_properties[name] = values
    if r.pos != len(raw):
        raise ValueError(f"{where}: {len(raw) - r.pos} trailing bytes after the last property map")
    return g


def gt_to_data(
    graph: GTGraph,
    label: str | None = "value",
    undirected: bool = True,
    features: str | None = "identity",
) -> Any:
    """Convert a :class:`GTGraph` to ``torch_geometric.data.Data`` with a vertex property as classes.

    Parameters
    ----------
    graph : GTGraph
    label : str or None
        Vertex property whose values become classes ``y`` (sorted distinct values -> ``0..C-1``;
        ``data.class_values`` keeps the original values). ``None``: no labels.
    undirected : bool
        Symmetrise the edges (both directions). Either way duplicate edges and self-loops are dropped.
    features : {"identity", None}
        ``"identity"``: ``x = I_N`` (float32, the usual choice for featureless graphs); ``None``: no ``x``.

    Returns
    -------
    torch_geometric.data.Data
        ``edge_index [2, E']``, ``num_nodes``, ``y [N]`` and ``num_classes`` when labelled, ``x [N, N]``
        for identity features.
    """
    from torch_geometric.data import Data
    from torch_geometric.utils import coalesce, remove_self_loops, to_undirected

    if not isinstance(graph, GTGraph):
        raise TypeError(f"graph must be a GTGraph, got {type(graph).__name__}")
    if features not in ("identity", None):
        raise ValueError(f"features must be 'identity' or None, got {features!r}")
    n = graph.num_nodes
    ei = torch.from_numpy(graph.edges.T.copy()).long()
    ei, _ = remove_self_loops(ei)
    ei = to_undirected(ei, num_nodes=n) if undirected else coalesce(ei, num_nodes=n)
    data = Data(edge_index=ei, num_nodes=n)
    if label is not None:
        if label not in graph.vertex_properties:
            raise ValueError(
                f"label: no vertex property {label!r}; available: {sorted(graph.vertex_properties)}"
            )
        values = graph.vertex_properties[label]
        if not isinstance(values, np.ndarray):
            try:
                values = np.asarray(values)
            except Exception as exc:  # pragma: no cover - ragged vectors
                raise ValueError(f"label: property {label!r} is not a scalar per vertex") from exc
        if values.ndim != 1:
            raise ValueError(f"label: property {label!r} is not a scalar per vertex")
        classes, y = np.unique(values, return_inverse=True)
        data.y = torch.from_numpy(y.astype(np.int64))
        data.num_classes = int(len(classes))
        data.class_values = classes.tolist()
    if features == "identity":
        data.x = torch.eye(n)
    return data


def find_collection_file(name: str, dirs: tuple[str, ...] | None = None) -> Path:
    """Path of ``<name>.gt.gz`` (or ``.gt``) from graph-tool's collection.

    Searched in order: ``$NEURIPS26_GT_COLLECTION`` (if set), then :data:`COLLECTION_DIRS`
    (Debian's ``python3-graph-tool`` location, then ``~/.cache/neurips26/graph_tool_collection``).

    Raises
    ------
    FileNotFoundError
        Not found; the message names the folders searched and how to obtain the files.
    """
    if not isinstance(name, str) or not name or "/" in name:
        raise ValueError(f"name must be a collection network name such as 'polblogs', got {name!r}")
    env = os.environ.get("NEURIPS26_GT_COLLECTION")
    search = ((env,) if env else ()) + (COLLECTION_DIRS if dirs is None else tuple(dirs))
    for d in search:
        for suffix in (".gt.gz", ".gt"):
            p = Path(d).expanduser() / f"{name}{suffix}"
            if p.is_file():
                return p
    raise FileNotFoundError(
        f"graph-tool collection network {name!r} not found in {list(search)}. The files ship in Debian's "
        "python3-graph-tool: `apt-get install python3-graph-tool`, or without installing it: "
        "`apt-get download python3-graph-tool && dpkg-deb -x python3-graph-tool_*.deb /tmp/gt` and copy "
        "/tmp/gt/usr/lib/python3/dist-packages/graph_tool/collection/*.gt.gz to "
        "~/.cache/neurips26/graph_tool_collection (or point NEURIPS26_GT_COLLECTION at a folder holding them)"
    )


def load_collection(name: str, label: str | None = None, undirected: bool = True, **kwargs) -> Any:
    """Read a collection network as PyG ``Data`` with its default label property (:data:`COLLECTION_LABELS`).

    ``polblogs`` (1,490 blogs, ``value`` = political leaning, 2 classes), ``polbooks`` (105 books,
    ``value`` = "c"/"l"/"n", 3 classes), ``football`` (115 teams, ``value`` = conference, 12 classes).
    Other keyword arguments go to :func:`gt_to_data`.
    """
    if label is None:
        label = COLLECTION_LABELS.get(name)
    return gt_to_data(read_gt(find_collection_file(name)), label=label, undirected=undirected, **kwargs)
