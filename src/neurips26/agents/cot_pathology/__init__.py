"""CoT pathology diagnostics: chain-of-thought as a trajectory over discrete latent states.

Paper
-----
"CoT pathology diagnostics" (NeurIPS 2026; title and full text not found, abstract only): seed file
``000_f8b4140a0e3b5d84.txt``, paragraph 18, abstract beginning "Long chain-of-thought (CoT) reasoning in large
language models often fails in recurring ways". Every threshold, phase boundary, surgery operator and
controller design below is the spec's inference from the abstract.

Modules
-------
* :mod:`.trajectory` -- steps (:class:`StepSegmenter`), step embeddings from hidden states,
  k-means latent states and the smoothed reference transition model (:class:`LatentStateModel`),
  positional phases.
* :mod:`.detectors` -- the six transition-grounded detection predicates (:data:`DETECTORS`,
  :func:`detect`, :func:`detect_all`) and the surface n-gram baseline.
* :mod:`.controllers` -- matched inference-time controllers as a ``transformers``
  ``LogitsProcessor`` (:class:`PathologyController`) driven by the step-level generation loop
  :class:`ControlledGenerator`, which performs the C1-C3 rollbacks (cut to the last good step,
  resample).
* :mod:`.controls` -- the generic controls (:data:`GENERIC_CONTROLS`, :func:`random_schedule`,
  :class:`VerifyCue`) and the answer-regex ``StoppingCriteria`` baseline (:class:`AnswerRegexStop`).
* :mod:`.surgery` -- controlled surgery (:func:`inject`), AUROC/onset evaluation and the
  counterfactual transition-vs-emission flip rates.
* :mod:`.synthetic` -- the generated arithmetic chains of thought used by the claim check.
* :mod:`.parallel` -- the scale-out path: surgery, encoding and detector evaluation over worker
  processes (:func:`parallel_map`, :func:`surgery_set`, :func:`parallel_detect_all`,
  :func:`parallel_evaluate_detectors`), equal to the single-process results with per-item seeds.

.. math::

    \\tau = (s_1, \\dots, s_n), \\quad s_i = \\arg\\min_k \\lVert z(\\bar h_i) - c_k \\rVert, \\qquad
    \\text{detector}_p(\\tau; P, \\theta) \\to (\\text{fired}, \\text{onset}, \\text{score})

Shapes
------
Chain-of-thought ids ``(T,)``; step embeddings ``(n, H)``; transition matrix ``(K + 2, K + 2)``;
controller scores ``(B, V)``.
"""

from . import parallel as _parallel
from .controllers import CONTROLLERS, ControlledGenerator, HiddenTap, PathologyController
from .controls import GENERIC_CONTROLS, AnswerRegexStop, VerifyCue, random_schedule
from .detectors import (
    DETECTORS,
    DetectorConfig,
    DetectorResult,
    detect,
    detect_all,
    ngram_repetition,
    results_table,
    step_ngram_repetition,
)
from .parallel import *  # noqa: F403  (its __all__, listed once there)
from .surgery import (
    SurgeryTemplates,
    auroc,
    counterfactual_flip_rate,
    evaluate_detectors,
    inject,
    path_change_rate,
)
from .synthetic import ArithmeticProblem, SyntheticArithmetic
from .trajectory import (
    ANSWER,
    LatentStateModel,
    Pathology,
    Phase,
    StepSegmenter,
    Trajectory,
    phases,
    step_features,
)

__all__ = [
    "ANSWER",
    "AnswerRegexStop",
    "ArithmeticProblem",
    "CONTROLLERS",
    "ControlledGenerator",
    "DETECTORS",
    "DetectorConfig",
    "DetectorResult",
    "GENERIC_CONTROLS",
    "HiddenTap",
    "LatentStateModel",
    "Pathology",
    "PathologyController",
    "Phase",
    "StepSegmenter",
    "SurgeryTemplates",
    "SyntheticArithmetic",
    "Trajectory",
    "VerifyCue",
    "auroc",
    "counterfactual_flip_rate",
    "detect",
    "detect_all",
    "evaluate_detectors",
    "inject",
    "ngram_repetition",
    "path_change_rate",
    "phases",
    "random_schedule",
    "results_table",
    "step_features",
    "step_ngram_repetition",
    *_parallel.__all__,
]
