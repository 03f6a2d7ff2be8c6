"""The kit's own small bilingual corpus: what the contract checks feed a plugin.

Small, so that every check runs in milliseconds, and awkward where real corpora are: typographic
apostrophes and quotes, « » with no-break spaces, narrow no-break spaces before % and €, decimal
commas, accents, a passage of five sentences (so that chunk sizes 2 and 3 leave a short last chunk)
and one of two (shorter than chunk size 3), each shown in two orders. And the cases that bite
(`BITES`): passages in which no sentence holds a term of the question (every chunk scores zero: a
scorer that divides by its passage's best score gives 0/0 = NaN), questions with no term once
stopwords are dropped (English "What is it?") or none at all (French "?"), one-sentence passages
(shorter than any chunk size), and a ten-sentence passage in which many chunks match (a sum of their
scores taken in another order can differ in its last bit). It is built in code rather than read from
the repository's `corpus/`, which an installed fragbench does not ship. The frames come from the
core's own builders (`fragbench.corpus.cases.sentences_frame`, `questions_frame`), so a plugin sees
exactly the columns the core passes, new ones included.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

    from fragbench.corpus.cases import Case
    from fragbench.experiment.plan import PlannedCall

NNBSP = "\u202f"
"""U+202F NARROW NO-BREAK SPACE, as French writes it before %, € and ?."""
NBSP = "\u00a0"
"""U+00A0 NO-BREAK SPACE, as French writes it inside « »."""

_CASES: list[dict[str, Any]] = [
    {
        "id": "kit-fees",
        "conditions": ("K2", "K4"),
        "variants": {"A": ("K1", "K2", "K3", "K4", "K5"), "B": ("K4", "K1", "K5", "K2", "K3")},
        "langs": {
            "en": {
                "source": "Kit Translations — Fees",
                "question": "How much does an urgent 2,000-word job cost?",
                "facts": {
                    "K1": "Kit Translations charges €0.10 per source word.",
                    "K2": "Urgent jobs, due within 24 hours, carry a 25% surcharge.",
                    "K3": "Orders of 5,000 words or more get a 10% discount.",
                    "K4": "Every order is billed at least €30, whatever its length.",
                    "K5": "Prices exclude VAT (“TVA” in France); it’s added to the invoice.",
                },
            },
            "fr": {
                "source": "Kit Traductions — Tarifs",
                "question": f"Combien coûte un travail urgent de 2{NNBSP}000 mots{NNBSP}?",
                "facts": {
                    "K1": f"Kit Traductions facture 0,10{NNBSP}€ par mot source.",
                    "K2": "Les travaux urgents, à livrer sous 24 heures, font l’objet d’une "
                          f"majoration de 25{NNBSP}%.",
                    "K3": f"Les commandes d’au moins 5{NNBSP}000 mots bénéficient d’une remise "
                          f"de 10{NNBSP}%.",
                    "K4": f"Toute commande est facturée au moins 30{NNBSP}€, quelle que soit sa "
                          "longueur.",
                    "K5": f"Les prix s’entendent hors TVA («{NBSP}VAT{NBSP}» en anglais).",
                },
            },
        },
    },
    {
        "id": "kit-hours",
        "conditions": ("S2",),
        "variants": {"A": ("S1", "S2"), "B": ("S2", "S1")},
        "langs": {
            "en": {
                "source": "Kit Translations — Opening hours",
                "question": "When does the office open?",
                "facts": {"S1": "The office opens at 9:00.",
                          "S2": "It closes at 17:30 on Fridays."},
            },
            "fr": {
                "source": "Kit Traductions — Horaires",
                "question": f"À quelle heure ouvre le bureau{NNBSP}?",
                "facts": {"S1": "Le bureau ouvre à 9 h.", "S2": "Il ferme à 17 h 30 le vendredi."},
            },
        },
    },
]

_CASES += [
    {
        "id": "kit-parking",
        "conditions": ("P1",),
        "variants": {"A": ("P1", "P2", "P3"), "B": ("P3", "P1", "P2")},
        "langs": {
            "en": {
                "source": "Kit Translations — Deliveries",
                "question": "Is there parking for bicycles?",
                "facts": {"P1": "Deliveries arrive on Mondays.",
                          "P2": "Invoices are sent by email.",
                          "P3": "Boxes are collected within a week."},
            },
            "fr": {
                "source": "Kit Traductions — Livraisons",
                "question": f"Y a-t-il un parking pour les vélos{NNBSP}?",
                "facts": {"P1": "Les livraisons arrivent le lundi.",
                          "P2": "Les factures sont envoyées par courriel.",
                          "P3": "Les cartons sont repris sous une semaine."},
            },
        },
    },
    {
        "id": "kit-vague",
        "conditions": ("V1",),
        "variants": {"A": ("V1", "V2"), "B": ("V2", "V1")},
        "langs": {
            "en": {
                "source": "Kit Translations — Shop",
                "question": "What is it?",
                "facts": {"V1": "The shop sells used books.",
                          "V2": "It ships orders the next day."},
            },
            "fr": {
                "source": "Kit Traductions — Boutique",
                "question": "?",
                "facts": {"V1": "La boutique vend des livres d’occasion.",
                          "V2": "Elle expédie les commandes le lendemain."},
            },
        },
    },
    {
        "id": "kit-museum",
        "conditions": ("M1",),
        "variants": {"A": ("M1",)},
        "langs": {
            "en": {
                "source": "Kit Translations — Museum",
                "question": "When is the museum open?",
                "facts": {"M1": "The museum is open daily from 10:00."},
            },
            "fr": {
                "source": "Kit Traductions — Musée",
                "question": f"Quand le musée est-il ouvert{NNBSP}?",
                "facts": {"M1": "Le musée est ouvert tous les jours dès 10 h."},
            },
        },
    },
]

_CASES += [
    {
        "id": "kit-delivery",
        "conditions": ("L2", "L8"),
        "variants": {"A": tuple(f"L{i}" for i in range(1, 11)),
                     "B": ("L6", "L1", "L9", "L3", "L10", "L5", "L2", "L8", "L4", "L7")},
        "langs": {
            "en": {
                "source": "Kit Translations — Delivery",
                "question": "How long does delivery take to Lyon, Paris or Nice?",
                "facts": {
                    "L1": "Delivery to Paris takes two days.",
                    "L2": "Delivery to Lyon takes three days, as long as the order is paid.",
                    "L3": "Nice is served on Tuesdays.",
                    "L4": "Long parcels cost more to deliver.",
                    "L5": "Lyon and Paris share one warehouse.",
                    "L6": "Returns take a week.",
                    "L7": "Delivery is free above €50.",
                    "L8": "Nice, Lyon and Paris offer pickup points for every delivery.",
                    "L9": "A parcel may take longer in August.",
                    "L10": "Tracking numbers are sent by text message.",
                },
            },
            "fr": {
                "source": "Kit Traductions — Livraison",
                "question": f"Combien de temps prend la livraison à Lyon, Paris ou Nice{NNBSP}?",
                "facts": {
                    "L1": "La livraison à Paris prend deux jours.",
                    "L2": "La livraison à Lyon prend trois jours, une fois la commande payée.",
                    "L3": "Nice est desservie le mardi.",
                    "L4": "Les colis longs coûtent plus cher à livrer.",
                    "L5": "Lyon et Paris partagent un entrepôt.",
                    "L6": "Les retours prennent une semaine.",
                    "L7": f"La livraison est offerte au-delà de 50{NNBSP}€.",
                    "L8": "Nice, Lyon et Paris ont des points relais pour chaque livraison.",
                    "L9": "Un colis peut prendre plus de temps en août.",
                    "L10": "Les numéros de suivi sont envoyés par SMS.",
                },
            },
        },
    },
]

BITES = {
    "kit-parking": "no sentence of the passage holds a term of its question: every chunk "
                   "scores zero",
    "kit-vague": "the question has no term once stopwords are dropped (en: \"What is it?\") "
                 "or none at all (fr: \"?\")",
    "kit-museum": "a passage of one sentence, shorter than any chunk size",
    "kit-delivery": "a passage of ten sentences with many matching chunks: scores added in "
                    "another order can differ in their last bit",
}
"""The sample cases that catch what a well-behaved corpus hides, by case ID: what a check's
failure on them says about the plugin."""


INSTRUCTIONS = {
    "en": "Answer the question using only the sentences of the source below. Back each claim "
          "with citations: the sentence ID and an extract copied word for word from that "
          "sentence. Answer in English, as JSON following the schema.",
    "fr": "Répondez à la question en vous appuyant uniquement sur les phrases de la source "
          "ci-dessous. Étayez chaque affirmation par des citations : l’identifiant de la phrase "
          "et un extrait recopié mot pour mot. Répondez en français, en JSON selon le schéma.",
}
"""The system instructions per language (`Request.instructions` of the sample calls)."""
INPUT = {
    "en": "Source: {source}\nQuestion: {question}\nSentences:\n{sentences}",
    "fr": "Source : {source}\nQuestion : {question}\nPhrases :\n{sentences}",
}
"""The user input's template per language (`Request.input` of the sample calls)."""
SENTENCE = "[{id}] {text}"
"""How one supplied sentence is written into the input: its fact ID, then its text."""
SCHEMA_NAME = "cited_answer"
"""The structured-output schema's name (`Request.schema_name` of the sample calls)."""
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "answer": {"type": "string"},
        "citations": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"id": {"type": "string"}, "extract": {"type": "string"}},
                "required": ["id", "extract"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["answer", "citations"],
    "additionalProperties": False,
}
"""Protocol 1.0's answer schema (strict: every object closed, every property required)."""


def cases() -> list[Case]:
    """The kit's cases, as `fragbench.corpus.cases.load_corpus` would give them."""
    from fragbench.corpus.cases import Case, Passage

    found = []
    for spec in _CASES:
        digest = hashlib.sha256(repr(spec).encode("utf-8")).hexdigest()
        found.append(Case(
            id=spec["id"], license="CC-BY-4.0", conditions=tuple(spec["conditions"]),
            variants={k: tuple(v) for k, v in spec["variants"].items()},
            langs={lang: Passage(source=p["source"], question=p["question"],
                                 facts=dict(p["facts"]))
                   for lang, p in spec["langs"].items()},
            path=Path(f"<fragbench.testing>/{spec['id']}.toml"), sha256=digest))
    return found


def sentences() -> pl.DataFrame:
    """Every sentence of every passage, exactly as the core passes them to a chunker."""
    from fragbench.corpus.cases import sentences_frame

    return sentences_frame(cases())


def questions() -> pl.DataFrame:
    """case, lang, question: as the core passes them to a scorer."""
    from fragbench.corpus.cases import questions_frame

    return questions_frame(cases())


class CharacterWindows:
    """A span chunker of the kit's own (`output = "spans"`): windows of about 40 x `size`
    characters, each ended at a space, so that sentences are cut. What check_scorer scores
    besides whole sentences: a scorer sees cut text and partial fact lists under a span
    chunker."""

    name = "fragbench-testing-character-windows"
    """Its name (it is never registered)."""
    api_version = "1.0"
    """The plugin API it is written for."""
    output = "spans"
    """It returns character spans (`fragbench.interfaces.Chunker`)."""

    def chunk(self, sentences: pl.DataFrame, size: int) -> pl.DataFrame:
        """One row per window: case, lang, variant, chunk, start, end."""
        import polars as pl

        from fragbench.corpus.cases import PASSAGE_SEPARATOR

        rows = []
        ordered = sentences.sort("case", "lang", "variant", "position")
        for (case, lang, variant), part in ordered.group_by(["case", "lang", "variant"],
                                                             maintain_order=True):
            text = PASSAGE_SEPARATOR.join(part["text"].to_list())
            start, number = 0, 0
            while start < len(text):
                end = min(start + 40 * size, len(text))
                if end < len(text) and " " in text[start + 1:end]:
                    end = text.rindex(" ", start + 1, end)
                rows.append((case, lang, variant, number, start, end))
                start, number = end + 1, number + 1
        return pl.DataFrame(rows, schema={"case": pl.String, "lang": pl.String,
                                          "variant": pl.String, "chunk": pl.Int32,
                                          "start": pl.Int32, "end": pl.Int32}, orient="row")


def chunks(sizes: tuple[int, ...] = (2, 3), chunker: Any = None) -> pl.DataFrame:
    """The chunks a scorer receives, as the core builds them
    (`fragbench.retrieval.passages.score_chunks`:
    `chunk_passages` at each size, then the `chunk_size` column): by default from the built-in
    `sentence-groups` chunker."""
    import polars as pl

    from fragbench.builtin.chunkers import SentenceGroups
    from fragbench.retrieval.passages import chunk_passages

    frame = sentences()
    chunker = chunker if chunker is not None else SentenceGroups()
    return pl.concat([chunk_passages(chunker, frame, size)
                      .with_columns(pl.lit(size, pl.Int32).alias("chunk_size"))
                      for size in sizes], how="vertical_relaxed")


def calls() -> list[PlannedCall]:
    """Four planned calls (case kit-fees, both languages, both orders, every sentence
    supplied), built as `fragbench.experiment.requests.build_request` builds them from prompt
    files."""
    from fragbench.experiment.plan import PlannedCall
    from fragbench.interfaces import Request

    case = cases()[0]
    planned = []
    for lang, variant in (("en", "A"), ("fr", "B"), ("en", "B"), ("fr", "A")):
        passage = case.langs[lang]
        ids = case.variants[variant]
        supplied = tuple((fid, passage.facts[fid]) for fid in ids)
        text = INPUT[lang].format(
            source=passage.source, question=passage.question,
            sentences="\n".join(SENTENCE.format(id=fid, text=t) for fid, t in supplied))
        call_id = f"{case.id}-{lang}-{variant}-full-r1"
        request = Request(call_id=call_id, lang=lang, instructions=INSTRUCTIONS[lang],
                          input=text, schema_name=SCHEMA_NAME, schema=SCHEMA,
                          question=passage.question, supplied=supplied)
        planned.append(PlannedCall(seq=len(planned) + 1, id=call_id, case=case.id, lang=lang,
                                   variant=variant, mode="full", rep=1, supplied_ids=ids,
                                   request=request))
    return planned
