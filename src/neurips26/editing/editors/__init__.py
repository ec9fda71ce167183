r"""Locate-then-edit knowledge editors (ROME, MEMIT, AlphaEdit) for any ``transformers`` causal LM.

Paper
-----
* ROME -- Meng et al., "Locating and Editing Factual Associations in GPT", NeurIPS 2022 (arXiv 2202.05262).
* MEMIT -- Meng et al., "Mass-Editing Memory in a Transformer", ICLR 2023 (arXiv 2210.07229).
* AlphaEdit -- Fang et al., "AlphaEdit: Null-Space Constrained Knowledge Editing for Language Models",
  ICLR 2025 (arXiv 2410.02355).

Math
----
The three editors treat one MLP output projection (``down_proj`` in Llama/Qwen2/Gemma, ``c_proj`` as
a GPT-2 ``Conv1D``) as a linear key -> value memory :math:`W \in \mathbb{R}^{d_v \times d_k}` and
write a fact with a closed-form low-rank update computed from keys :math:`K` (the projection's input
at the last subject token), residuals :math:`R` (what the output must additionally carry for the new
object to be predicted) and the uncentred key second moment :math:`C_0 = \mathbb{E}[k k^\top]` of
generic text.

.. math::
    \Delta W_{ROME} = r\,\frac{(C_0^{-1} k)^\top}{k^\top C_0^{-1} k},\qquad
    \Delta W_{MEMIT} = R K^\top (\lambda C_0 + K K^\top)^{-1},\qquad
    \Delta W_{AlphaEdit} = R K^\top P \big((K_p K_p^\top + K K^\top) P + \lambda_2 I\big)^{-1}

with :math:`P` the projector onto the null space of :math:`C_0` (:func:`null_space_projector`).

Vocabulary follows EasyEdit: a request has ``prompt``, ``subject``, ``target_new`` and
``ground_truth``. Metrics (see :func:`edit_metrics`):

* *reliability* -- teacher-forced token accuracy of ``target_new`` on the edited prompt;
* *generalization* -- the same on paraphrases (here: other templates);
* *portability* -- the same on prompts that need the fact indirectly (here: another language);
* *locality* -- fraction of unrelated prompts whose top-1 next token is unchanged by the edit.

Every editor returns an :class:`EditUpdate` with :math:`\Delta W = R\,\Phi`, the factorisation that
the cross-lingual gap decomposition relies on. :func:`apply_update` adds it in place and returns a
handle whose :meth:`UndoHandle.revert` restores the weight bit-exactly.

Shapes
------
- :func:`compute_keys`: keys ``K [d_k, n]`` (float64), one column per request;
  :func:`compute_target_values`: residuals ``R [d_v, n]``; :func:`estimate_key_moment`: ``C_0 [d_k, d_k]``.
- :class:`EditUpdate`: ``delta_W [d_v, d_k] = R_s @ Phi`` with ``R_s [d_v, n]``, ``Phi [n, d_k]`` and
  ``K_s [d_k, n]``; :func:`null_space_projector`: ``P [d_k, d_k]``.

Modules
-------
- :mod:`.requests`: :class:`EditRequest`, :class:`TokenizedRequest`, :func:`tokenize_request`.
- :mod:`.site`: :class:`EditSite`, :func:`compute_keys`, :func:`compute_target_values`.
- :mod:`.covariance`: :func:`estimate_key_moment`.
- :mod:`.update`: :class:`EditUpdate`, :class:`UndoHandle`, :func:`apply_update`.
- :mod:`.rome`: :func:`rome_update`.
- :mod:`.memit`: :func:`memit_update`, :func:`memit_multilayer`.
- :mod:`.alphaedit`: :func:`null_space_projector`, :func:`alphaedit_update`.
- :mod:`.metrics`: :func:`top1_next_tokens`, :func:`edit_metrics`, :func:`timed`.
"""

from neurips26.editing.editors.alphaedit import alphaedit_update, null_space_projector
from neurips26.editing.editors.covariance import estimate_key_moment
from neurips26.editing.editors.memit import memit_multilayer, memit_update
from neurips26.editing.editors.metrics import edit_metrics, top1_next_tokens
from neurips26.editing.editors.requests import EditRequest, TokenizedRequest, tokenize_request
from neurips26.editing.editors.rome import rome_update
from neurips26.editing.editors.site import EditSite, compute_keys, compute_target_values
from neurips26.editing.editors.update import EditUpdate, UndoHandle, apply_update

__all__ = [
    "EditRequest",
    "TokenizedRequest",
    "tokenize_request",
    "EditSite",
    "EditUpdate",
    "UndoHandle",
    "estimate_key_moment",
    "compute_keys",
    "compute_target_values",
    "rome_update",
    "memit_update",
    "null_space_projector",
    "alphaedit_update",
    "apply_update",
    "memit_multilayer",
    "edit_metrics",
    "top1_next_tokens",
]
