"""RadOmni data: generated paired NCCT / CECT phantoms with reports, pathology labels and masks."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from neurips26.common.checks import check_choice, check_int
from neurips26.vision.radomni.encoder import HU_WINDOW

# ------------------------------------------------------------------------------------------------------ data
LESION_TYPES = ("hypervascular", "hypovascular", "cystic")
_NC_LESION = {"hypervascular": 46.0, "hypovascular": 40.0, "cystic": 34.0}  # weakly separable on NCCT
_CE_LESION = {"hypervascular": 170.0, "hypovascular": 65.0, "cystic": 34.0}


def _ellipse(yy, xx, cy, cx, ry, rx, angle=0.0):
    c, s = math.cos(angle), math.sin(angle)
    dy, dx = yy - cy, xx - cx
    return ((dy * c + dx * s) / ry) ** 2 + ((-dy * s + dx * c) / rx) ** 2 <= 1.0


class SyntheticCTDataset(torch.utils.data.Dataset):
    """Paired NCCT / CECT axial "abdominal" phantoms (numpy ellipses; scikit-image is not installed in this
    environment) with template reports, pathology labels and lesion masks.

    Anatomy (HU, NCCT / CECT): fat -100, body wall 40 / 60, liver 55 / 110, spleen 48 / 120, kidneys 35 / 180,
    aorta 40 / 200, spine 400. 0-2 liver lesions (radius 5-14 % of the image; types hypervascular 46 / 170,
    hypovascular 40 / 65 with a 130 rim, cystic 34 / 34, each +-5 HU), a spleen lesion with p = 0.12 (M1) and
    0-3 lymph-node blobs (N1 when one is > 10 mm, pixel = 1 mm at size 64). Gaussian noise sigma 12 HU (centre
    "B": sigma 18 and +10 HU offset). Values are windowed to [-160, 240] HU and scaled to [0, 1].
    Pathology: ``malignant`` (hypovascular, or hypervascular with radius > 10 % of the image), ``T`` (largest-lesion size bin,
    0 = none), ``N``, ``M``, ``type`` (type of the largest lesion, 3 = none).
    """

    def __init__(self, n: int, size: int = 64, seed: int = 0, centre: str = "A"):
        self.n, self.size = check_int("n", n, 1), check_int("size", size, 16)
        self.seed, self.centre = check_int("seed", seed), check_choice("centre", centre, ("A", "B"))
        self.noise_hu, self.offset_hu = (12.0, 0.0) if centre == "A" else (18.0, 10.0)
        rng = np.random.default_rng([seed, 0 if centre == "A" else 1])
        nc, ce, masks, reports, path = [], [], [], [], {k: [] for k in ("malignant", "T", "N", "M", "type")}
        for _ in range(n):
            a, b, m, r, p = self._case(rng)
            nc.append(a), ce.append(b), masks.append(m), reports.append(r)
            for k in path:
                path[k].append(p[k])
        self.ncct_hu = torch.from_numpy(np.stack(nc)).float().unsqueeze(1)
        self.cect_hu = torch.from_numpy(np.stack(ce)).float().unsqueeze(1)
        lo, hi = HU_WINDOW
        self.ncct = (self.ncct_hu.clamp(lo, hi) - lo) / (hi - lo)
        self.cect = (self.cect_hu.clamp(lo, hi) - lo) / (hi - lo)
        self.mask = torch.from_numpy(np.stack(masks)).unsqueeze(1)
        self.reports = reports
        self.pathology = {k: torch.tensor(v, dtype=torch.long) for k, v in path.items()}

    def _case(self, rng):
        s = self.size
        yy, xx = np.mgrid[0:s, 0:s].astype(np.float64) / s
        j = lambda v, d: v + rng.uniform(-d, d)  # noqa: E731
        nc = np.full((s, s), -1000.0)
        ce = np.full((s, s), -1000.0)
        organ = {}
        body = _ellipse(yy, xx, 0.5, 0.5, j(0.40, 0.03), j(0.46, 0.03))
        inner = _ellipse(yy, xx, 0.5, 0.5, j(0.36, 0.02), j(0.42, 0.02))
        organ["fat"] = (body, -100.0, -100.0)
        organ["wall"] = (body & ~inner, 40.0, 60.0)
        organ["liver"] = (
            _ellipse(yy, xx, j(0.45, 0.03), j(0.33, 0.03), j(0.2, 0.02), j(0.17, 0.02), j(0.3, 0.2)),
            55.0,
            110.0,
        )
        organ["spleen"] = (
            _ellipse(yy, xx, j(0.42, 0.03), j(0.76, 0.02), j(0.1, 0.015), j(0.06, 0.01)),
            48.0,
            120.0,
        )
        organ["kidney_l"] = (_ellipse(yy, xx, j(0.66, 0.02), j(0.36, 0.02), 0.07, 0.045), 35.0, 180.0)
        organ["kidney_r"] = (_ellipse(yy, xx, j(0.66, 0.02), j(0.64, 0.02), 0.07, 0.045), 35.0, 180.0)
        organ["aorta"] = (_ellipse(yy, xx, j(0.6, 0.01), j(0.52, 0.01), 0.035, 0.035), 40.0, 200.0)
        organ["spine"] = (_ellipse(yy, xx, 0.76, 0.5, 0.07, 0.07), 400.0, 400.0)
        for reg, a, b in organ.values():
            nc[reg], ce[reg] = a, b
        liver = organ["liver"][0]
        mask = np.zeros((s, s), bool)
        n_les = rng.choice(3, p=(0.25, 0.5, 0.25))
        lesions = []
        ly, lx = np.nonzero(liver)
        for _ in range(n_les):
            k = rng.integers(len(ly))
            rad = rng.uniform(0.05, 0.14)
            typ = LESION_TYPES[rng.integers(3)]
            reg = _ellipse(yy, xx, ly[k] / s, lx[k] / s, rad, rad * rng.uniform(0.8, 1.2)) & liver
            if not reg.any():
                continue
            lesions.append((typ, rad, "liver", ly[k] / s))
            nc[reg] = _NC_LESION[typ] + rng.uniform(-5, 5)
            ce[reg] = _CE_LESION[typ] + rng.uniform(-5, 5)
            if typ == "hypovascular":
                rim = reg & ~_ellipse(yy, xx, ly[k] / s, lx[k] / s, 0.7 * rad, 0.7 * rad)
                ce[rim] = 130.0
            mask |= reg
        m_stage = int(rng.random() < 0.12)
        if m_stage:
            sy, sx = np.nonzero(organ["spleen"][0])
            k = rng.integers(len(sy))
            reg = _ellipse(yy, xx, sy[k] / s, sx[k] / s, 0.03, 0.03) & organ["spleen"][0]
            nc[reg], ce[reg] = 42.0, 70.0
            mask |= reg
        node_r = []
        for _ in range(rng.integers(4)):
            r = rng.uniform(0.06, 0.24)  # diameter as a fraction of the image (x 64 = mm)
            node_r.append(r)
            cy, cx = j(0.62, 0.04), j(0.5 + rng.choice((-1, 1)) * 0.12, 0.02)
            reg = _ellipse(yy, xx, cy, cx, r / 2, r / 2) & body
            nc[reg], ce[reg] = 45.0, 90.0
        n_stage = int(any(r * 64 > 10 for r in node_r))
        noise = rng.normal(0.0, self.noise_hu, (2, s, s))
        nc = nc + self.offset_hu + noise[0]
        ce = ce + self.offset_hu + noise[1]
        if lesions:
            typ, rad, _, pos = max(lesions, key=lambda t: t[1])
            t_cat = 1 + int(rad > 0.08) + int(rad > 0.11)
            malignant = int(
                any(t == "hypovascular" or (t == "hypervascular" and r > 0.1) for t, r, _, _ in lesions)
            )
            seg = "right lobe" if pos < 0.45 else "left lobe"
            density = {"hypervascular": "isodense", "hypovascular": "hypodense", "cystic": "hypodense"}[typ]
            enh = {
                "hypervascular": "arterial hyperenhancement",
                "hypovascular": "rim enhancement",
                "cystic": "no enhancement",
            }[typ]
            size = ("small", "medium", "large")[t_cat - 1]
            report = f"{size} {density} liver lesion in the {seg} with {enh}"
            type_id = LESION_TYPES.index(typ)
        else:
            t_cat, malignant, type_id, report = 0, 0, 3, "no focal liver lesion"
        report += "; enlarged lymph nodes" if n_stage else "; no enlarged lymph nodes"
        report += "; splenic lesion" if m_stage else ""
        p = {"malignant": malignant, "T": t_cat, "N": n_stage, "M": m_stage, "type": type_id}
        return nc, ce, mask, report, p

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return self.batch([i])

    def batch(self, idx: Sequence[int] | Tensor) -> dict[str, Any]:
        """Collated dict: ``ncct``, ``cect``, ``mask`` ``(B, 1, H, W)``, ``report`` list, ``pathology`` dict."""
        idx = torch.as_tensor(idx, dtype=torch.long)
        return {
            "ncct": self.ncct[idx],
            "cect": self.cect[idx],
            "mask": self.mask[idx],
            "report": [self.reports[int(i)] for i in idx],
            "pathology": {k: v[idx] for k, v in self.pathology.items() if k in ("malignant", "T", "N", "M")},
        }

    def lesion_cnr(self, phase: str = "ncct") -> float:
        """Mean over liver lesions of |mean(lesion) - mean(liver)| / noise sigma (HU), for ``phase``."""
        img = {"ncct": self.ncct_hu, "cect": self.cect_hu}[check_choice("phase", phase, ("ncct", "cect"))]
        vals = []
        for i in range(self.n):
            m = self.mask[i, 0]
            if m.any() and self.pathology["type"][i] < 3:
                ring = (F.max_pool2d(m[None, None].float(), 7, 1, 3)[0, 0] > 0) & ~m
                vals.append(abs(float(img[i, 0][m].mean() - img[i, 0][ring].mean())) / self.noise_hu)
        return float(np.mean(vals)) if vals else float("nan")
