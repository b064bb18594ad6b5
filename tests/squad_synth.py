"""Small SQuAD v1.1 files in the exact real format, generated for the tests.

Paragraphs state facts about invented people (birthplace, birth year, the
instrument they play, a country's capital) in varying order and wording;
questions ask for one fact, so a reader has to find the entity the question
names and the slot its question word asks for. Answers keep the real format's
features: ``answer_start`` character offsets, several ground truths in dev
(with and without the article, as SQuAD annotators give them), non-ASCII
text and multi-word answers.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

FIRST = ["Ada", "Boris", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Keiko", "Lars"]
LAST = ["Moreau", "Novak", "Okafor", "Petrov", "Quist", "Rossi", "Silva", "Tanaka", "Ulrich", "Varga", "Weber", "Young"]
CITIES = ["Lyon", "Porto", "Kraków", "Québec", "São Paulo", "Turin", "Ghent", "Bergen", "Cork", "Lund", "Graz", "Basel", "New Haven", "Le Havre"]
COUNTRIES = ["Freedonia", "Sylvania", "Borduria", "Syldavia", "Genovia", "Latveria", "Elbonia", "Moldavia"]
INSTRUMENTS = ["violin", "cello", "piano", "flute", "oboe", "harp", "trumpet", "clarinet"]


class _Paragraph:
    def __init__(self):
        self.text = ""
        self.qas: list[tuple[str, list[tuple[str, int]]]] = []

    def say(self, *parts: str | tuple[str]) -> dict[tuple[str], int]:
        """Append a sentence; parts in a 1-tuple are answers, whose offsets are returned."""
        where = {}
        if self.text:
            self.text += " "
        for part in parts:
            if isinstance(part, tuple):
                where[part] = len(self.text)
                self.text += part[0]
            else:
                self.text += part
        return where


def _paragraph(rng: random.Random, qid: str, dev: bool) -> dict:
    p = _Paragraph()
    people = [f"{first} {last}" for first, last in zip(rng.sample(FIRST, 2), rng.sample(LAST, 2))]
    facts = []
    for person in people:
        city, year, instrument = rng.choice(CITIES), str(rng.randint(1800, 1999)), rng.choice(INSTRUMENTS)
        facts.append(("born", person, city, year))
        facts.append(("plays", person, instrument))
    country, capital = rng.choice(COUNTRIES), rng.choice(CITIES)
    facts.append(("capital", country, capital))
    rng.shuffle(facts)
    qas = []
    for fact in facts:
        if fact[0] == "born":
            _, person, city, year = fact
            if rng.random() < 0.5:
                at = p.say(person, " was born in ", (city,), " in ", (year,), ".")
            else:
                at = p.say("In ", (year,), ", ", person, " was born in ", (city,), ".")
            qas.append((f"Where was {person} born?", [(city, at[(city,)])]))
            qas.append((rng.choice([f"When was {person} born?", f"In what year was {person} born?"]), [(year, at[(year,)])]))
        elif fact[0] == "plays":
            _, person, instrument = fact
            at = p.say(person, " plays ", ("the " + instrument,), rng.choice([".", " very well.", " in an orchestra."]))
            start = at[("the " + instrument,)]
            answers = [("the " + instrument, start)] + ([(instrument, start + 4)] if dev else [])
            qas.append((f"What instrument does {person} play?", answers))
        else:
            _, country, capital = fact
            at = p.say("The capital of ", country, " is ", (capital,), ".")
            qas.append((f"What is the capital of {country}?", [(capital, at[(capital,)])]))
    rng.shuffle(qas)
    return {
        "context": p.text,
        "qas": [{"id": f"{qid}-{n}", "question": q, "answers": [{"answer_start": s, "text": t} for t, s in answers]} for n, (q, answers) in enumerate(qas[:4])],
    }


def squad_document(articles: int, paragraphs: int, seed: int, dev: bool = False) -> dict:
    rng = random.Random(seed)
    data = []
    for a in range(articles):
        title = f"{'Dev' if dev else 'Train'}_article_{a}"
        data.append({"title": title, "paragraphs": [_paragraph(rng, f"{'d' if dev else 't'}{seed}-{a}-{n}", dev) for n in range(paragraphs)]})
    return {"data": data, "version": "1.1"}


def write_squad_files(directory: Path, train_articles: int = 30, dev_articles: int = 6, paragraphs: int = 2) -> dict[str, Path]:
    """train-v1.1.json and dev-v1.1.json in ``directory``, as the official files are laid out."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, doc in (
        ("train-v1.1.json", squad_document(train_articles, paragraphs, seed=1)),
        ("dev-v1.1.json", squad_document(dev_articles, paragraphs, seed=2, dev=True)),
    ):
        paths[name] = directory / name
        paths[name].write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    return paths


def write_expect(paths: dict[str, Path], expect: Path) -> Path:
    """The checksums of generated files, as `dawnpipe fetch --expect` reads them."""
    import hashlib

    import yaml

    spec = {name: {"sha256": hashlib.sha256(p.read_bytes()).hexdigest(), "bytes": p.stat().st_size} for name, p in paths.items()}
    expect.write_text(yaml.safe_dump({"files": spec}), encoding="utf-8")
    return expect


if __name__ == "__main__":  # python tests/squad_synth.py data/synthetic/squad  (for config/test-squad.yaml by hand)
    import sys

    out = Path(sys.argv[1] if len(sys.argv) > 1 else "data/synthetic/squad")
    print(write_expect(write_squad_files(out), out / "expect.yaml"))
