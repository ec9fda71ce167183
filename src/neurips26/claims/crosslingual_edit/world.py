"""Cross-lingual edit claim: the two-artificial-language fact world and its tiny model."""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from neurips26.common.models import BOS_ID, EOS_ID, build_tiny_lm
from neurips26.common.training import train_or_load
from neurips26.editing.editors import TokenizedRequest

EDITORS = ("rome", "memit", "alphaedit")


# ------------------------------------------------------------------------------- the fact world
class BilingualWorld:
    """Two artificial languages over one fact table ``obj[s, r]``.

    Token layout: specials 0-3, then per language subject syllables (2 tokens per subject name),
    relation template words (3 templates per relation, word orders ``x y S``, ``x S y``, ``S x y z``),
    objects (one token each) and filler words. The edit template (template 0) ends with the subject in
    both languages, so the subject's last token is the prediction position (a 2-layer model looks
    facts up there; with the subject first, an MLP shift at the subject barely reaches the answer).
    """

    PATTERNS = (("w", "w", "S"), ("w", "S", "w"), ("S", "w", "w", "w"))

    def __init__(self, n_subjects: int, n_relations: int, n_objects: int, seed: int, n_fillers: int = 8):
        rng = random.Random(seed)
        self.S, self.R, self.O = n_subjects, n_relations, n_objects
        syl = int(np.ceil(np.sqrt(n_subjects))) + 1
        nxt = [4]

        def take(k):
            out = list(range(nxt[0], nxt[0] + k))
            nxt[0] += k
            return out

        self.lang = {}
        for li, name in enumerate(("A", "B")):
            first, second = take(syl), take(syl)
            pairs = [(a, b) for a in first for b in second]
            rng.shuffle(pairs)
            templates = {}
            for r in range(n_relations):
                order = [0, 1, 2] if li == 0 else [0, 2, 1]
                templates[r] = [[("S" if t == "S" else take(1)[0]) for t in self.PATTERNS[p]] for p in order]
            self.lang[name] = {
                "subjects": pairs[:n_subjects],
                "templates": templates,
                "objects": {r: take(n_objects) for r in range(n_relations)},
                "fillers": take(n_fillers),
            }
        self.vocab_size = nxt[0]
        self.facts = np.array(
            [[rng.randrange(n_objects) for _ in range(n_relations)] for _ in range(n_subjects)]
        )

    def prompt(self, lang: str, s: int, r: int, template: int = 0) -> tuple[list[int], tuple[int, int]]:
        """Prompt tokens (no BOS, no object) and the subject's token span."""
        L = self.lang[lang]
        out, span = [], None
        for t in L["templates"][r][template]:
            if t == "S":
                span = (len(out), len(out) + 2)
                out += list(L["subjects"][s])
            else:
                out.append(t)
        return out, span

    def obj(self, lang: str, r: int, o: int) -> int:
        return self.lang[lang]["objects"][r][o]

    def line(self, lang: str, s: int, r: int, rng: random.Random) -> list[int]:
        fill = [rng.choice(self.lang[lang]["fillers"]) for _ in range(rng.randint(0, 4))]
        p, _ = self.prompt(lang, s, r, rng.randrange(3))
        return fill + p + [self.obj(lang, r, int(self.facts[s, r]))]

    def training_lines(self, reps: int, p_par: float, seed: int) -> list[list[int]]:
        rng = random.Random(seed)
        lines = []
        for _ in range(reps):
            for s in range(self.S):
                for r in range(self.R):
                    if rng.random() < p_par:
                        lines.append(
                            [BOS_ID] + self.line("A", s, r, rng) + self.line("B", s, r, rng) + [EOS_ID]
                        )
                    else:
                        for lang in ("A", "B"):
                            lines.append([BOS_ID] + self.line(lang, s, r, rng) + [EOS_ID])
        return lines

    def request(
        self, lang: str, s: int, r: int, new: int | None, template: int = 0, bos: bool = True
    ) -> TokenizedRequest:
        p, span = self.prompt(lang, s, r, template)
        head = [BOS_ID] if bos else []
        old = self.obj(lang, r, int(self.facts[s, r]))
        tgt = old if new is None else self.obj(lang, r, new)
        return TokenizedRequest(tuple(head + p), len(head) + span[1] - 1, (tgt,), (old,))


def _model_and_world(cfg: dict) -> tuple[Any, BilingualWorld, dict]:
    world = BilingualWorld(cfg["subjects"], cfg["relations"], cfg["objects"], seed=cfg["world_seed"])
    lines = world.training_lines(cfg["reps"], cfg["p_par"], cfg["world_seed"])
    arch = dict(
        hidden_size=cfg["hidden"],
        intermediate_size=cfg["intermediate"],
        num_hidden_layers=cfg["layers"],
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
    )
    model, hist = train_or_load(
        "crosslingual-edit-world",
        {
            "world": {k: cfg[k] for k in ("subjects", "relations", "objects", "world_seed", "reps", "p_par")},
            "arch": arch,
        },
        lambda: build_tiny_lm("llama", vocab_size=world.vocab_size, seed=cfg["train_seed"], **arch),
        lines,
        steps=cfg["train_steps"],
        batch_size=64,
        lr=cfg["train_lr"],
        warmup=20,
        seed=cfg["train_seed"],
    )
    return model, world, hist
