"""SKIM claim: the synthetic tool-calling task (8 tools with enum arguments), its JSON schema, request
generator and the word- and subword-level tokenisations used by the teachers and the scorer."""

from __future__ import annotations

import random

from neurips26.agents.skim import (
    JsonSchemaGrammar,
)

VERBS = {"create": ("book", "start", "make"), "remove": ("cancel", "stop", "drop")}
NOUNS = {
    "trip": ("trip", "flight"),
    "music": ("song", "music"),
    "message": ("message", "note"),
    "food": ("food", "meal"),
}
TOOLS = {
    ("create", "trip"): ("book_trip", "paris rome oslo lima cairo tokyo delhi quito"),
    ("remove", "trip"): ("cancel_trip", "monday tuesday wednesday thursday friday saturday"),
    ("create", "music"): ("play_music", "jazz rock blues funk opera disco reggae"),
    ("remove", "music"): ("stop_music", "kitchen bedroom garage office garden hallway patio attic"),
    ("create", "message"): ("send_message", "alice bob carol dave erin frank grace heidi ivan"),
    ("remove", "message"): ("delete_message", "spam drafts inbox archive trash outbox"),
    ("create", "food"): ("order_food", "pizza sushi tacos curry ramen salad bagel pasta noodles burger"),
    ("remove", "food"): ("cancel_food", "lunch dinner breakfast brunch snack dessert"),
}
FILLER = (
    "please now kindly the my for today quickly thanks could you a some right away me to with later soon "
    "hey ok also maybe just"
).split()


def tool_values() -> dict[str, list[str]]:
    return {name: values.split() for name, values in TOOLS.values()}


def tool_schema() -> dict:
    """JSON schema of a call: one object per tool with its ``const`` name and ``enum`` argument."""
    return {
        "anyOf": [
            {
                "type": "object",
                "properties": {"tool": {"const": t}, "arg": {"enum": vs}},
                "required": ["tool", "arg"],
                "additionalProperties": False,
            }
            for t, vs in tool_values().items()
        ]
    }


def make_requests(n: int, seed: int) -> list[tuple[list[str], dict[str, str]]]:
    """``n`` (words, reference call) pairs; seeded."""
    rng = random.Random(seed)
    keys = list(TOOLS)
    values = tool_values()
    out = []
    for _ in range(n):
        kind, noun = keys[rng.randrange(len(keys))]
        tool, _ = TOOLS[(kind, noun)]
        arg = rng.choice(values[tool])
        other = rng.choice([t for t in values if t != tool])
        words = [rng.choice(VERBS[kind]), rng.choice(NOUNS[noun]), arg, rng.choice(values[other])]
        length = rng.randint(12, 20)
        words += [rng.choice(FILLER) for _ in range(length - len(words))]
        rng.shuffle(words)
        out.append((words, {"tool": tool, "arg": arg}))
    return out


def call_text(call: dict[str, str], separators: tuple[str, str]) -> str:
    item, key = separators
    return "{" + f'"tool"{key}"{call["tool"]}"{item}"arg"{key}"{call["arg"]}"' + "}"


class WordTask:
    """Word-level vocabulary of the tiny model: specials, prompt words, JSON pieces."""

    separators = (",", ":")
    pad, bos, eos = 0, 1, 2

    def __init__(self):
        words = sorted(
            {w for v in VERBS.values() for w in v} | {w for v in NOUNS.values() for w in v} | set(FILLER)
        )
        words += sorted({v for vs in tool_values().values() for v in vs})
        json_pieces = ["{", "}", ":", ",", '"tool"', '"arg"'] + [f'"{t}"' for t in tool_values()]
        json_pieces += [f'"{v}"' for vs in tool_values().values() for v in vs]
        self.vocab = ["<pad>", "<s>", "</s>", "<unk>", "call>"] + words + json_pieces
        self.index = {w: i for i, w in enumerate(self.vocab)}

    def grammar(self) -> JsonSchemaGrammar:
        return JsonSchemaGrammar(
            tool_schema(), vocab=self.vocab, eos_token_id=self.eos, separators=self.separators
        )

    def prompt(self, words: list[str]) -> list[int]:
        return [self.bos] + [self.index[w] for w in words] + [self.index["call>"]]

    def output(self, call: dict[str, str]) -> list[int]:
        pieces = ["{", '"tool"', ":", f'"{call["tool"]}"', ",", '"arg"', ":", f'"{call["arg"]}"', "}"]
        return [self.index[p] for p in pieces] + [self.eos]


class SubwordTask:
    """SmolLM2 tokenizer: prompt ``Request: <words>\\nCall: ``, output the JSON text + eos."""

    separators = (", ", ": ")

    def __init__(self, tokenizer, vocab_size: int):
        self.tok, self.vocab_size = tokenizer, vocab_size
        self.pad, self.eos = tokenizer.pad_token_id, tokenizer.eos_token_id
        self.compiled: JsonSchemaGrammar | None = None

    def grammar(self) -> JsonSchemaGrammar:
        if self.compiled is not None:  # compiling against the 49k-token vocabulary takes seconds
            return self.compiled
        return JsonSchemaGrammar(
            tool_schema(),
            tokenizer=self.tok,
            vocab_size=self.vocab_size,
            separators=self.separators,
            forced="bytes",
        )

    def prompt(self, words: list[str]) -> list[int]:
        return self.tok("Request: " + " ".join(words) + "\nCall: ", add_special_tokens=False)["input_ids"]

    def output(self, call: dict[str, str]) -> list[int]:
        return self.tok(call_text(call, self.separators), add_special_tokens=False)["input_ids"] + [self.eos]


def _tool_prefix_len(grammar: JsonSchemaGrammar, output: list[int], call: dict, separators) -> int:
    """Smallest k whose first k output tokens cover the tool value (tool accuracy scores those positions)."""
    target = len(('{"tool"' + separators[1] + '"' + call["tool"] + '"').encode())
    n = 0
    for k, tok in enumerate(output, 1):
        n += len(grammar.token_bytes[tok])
        if n >= target:
            return k
    return len(output)
