"""A LongMemEval-style retrieval set: synthetic multi-session conversations with planted facts.

Four kinds of question, as LongMemEval has them: single-session (one planted message answers it),
multi-session (two messages in different sessions), temporal (a dated event) and knowledge-update
(an old fact and the newer one replacing it; the newer must be found). Filler turns around them are
ordinary chatter that shares no planted word. Deterministic (seeded).

`build(paraphrased=True)` asks the multi-session, temporal and knowledge-update questions (75 of
105) in other words: each shares one topic word with its evidence (the name, the event's last word,
the category) and nothing of its phrasing, and a distractor line in another session uses that word
too. That is still a lexical test — the scripted embeddings are hashed words, so a question sharing
no word with its evidence cannot be found by either half of the hybrid search here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

SESSIONS = 16
FILLER_TURNS = 8

FILLER = (
    "Could you suggest something quick for dinner tonight? I have rice and some vegetables.",
    "The weather was grey again today, I stayed inside most of the afternoon.",
    "I read two chapters of a novel before bed, it was slow going.",
    "Remind me how to convert ounces to grams, I always forget.",
    "We had a long meeting at the office that could have been an email.",
    "I went for a short walk around the block to clear my head.",
    "What is a good way to keep basil fresh for longer?",
    "My phone battery drains so fast lately, any tips?",
    "I tried a new coffee shop near the station, it was fine.",
    "Can you explain the difference between a virus and bacteria simply?",
)

SINGLE = [
    ("locker code", "4417"),
    ("bike lock combination", "9021"),
    ("wifi password hint", "the blue heron"),
    ("dentist", "Dr. Okafor"),
    ("landlord", "Mrs. Lindqvist"),
    ("blood type", "O negative"),
    ("shoe size", "44"),
    ("license plate", "KX-482-PL"),
    ("gym membership number", "77120"),
    ("library card", "LB-5530"),
    ("piano teacher", "Mr. Haddad"),
    ("allotment plot", "number 31"),
    ("insurance broker", "Tamsin Welby"),
    ("accountant", "Rafael Ortiz"),
    ("vet", "Dr. Amadi"),
    ("childhood nickname", "Pip"),
    ("first car", "a green Fiat Panda"),
    ("hometown", "Tromsø"),
    ("grandmother's maiden name", "Kowalczyk"),
    ("favourite hiking trail", "the Skyline Ridge loop"),
    ("book club", "the Thursday Readers"),
    ("parking spot", "B-17"),
    ("tailor", "Giorgio"),
    ("yoga studio", "Lotus Loft"),
    ("running shoes", "Brooks Ghost"),
    ("dog walker", "Sunita"),
    ("storage unit", "unit 208"),
    ("ferry pass", "FP-3390"),
    ("chess rating", "1645"),
    ("violin maker", "Ansgar Brandt"),
]

MULTI = [
    ("cat", "Miso", "allergic to chicken"),
    ("parrot", "Kiwi", "afraid of umbrellas"),
    ("nephew", "Tobias", "studying marine biology"),
    ("neighbour", "Hedda", "a retired pilot"),
    ("colleague", "Baptiste", "moving to Montreal"),
    ("tortoise", "Sheldon", "ninety years old"),
    ("sister", "Ilse", "training for a triathlon"),
    ("mentor", "Priyanka", "writing a cookbook"),
    ("goldfish", "Bubbles", "living in a pond"),
    ("cousin", "Matteo", "opening a bakery"),
    ("hamster", "Nugget", "escaping every night"),
    ("roommate", "Yusuf", "learning Japanese"),
    ("godson", "Elio", "playing the trumpet"),
    ("horse", "Juniper", "lame in the left foreleg"),
    ("plant", "Fernando", "a twelve year old fern"),
    ("boss", "Annika", "leaving in spring"),
    ("rabbit", "Clover", "fond of parsley"),
    ("uncle", "Desmond", "restoring a sailboat"),
    ("tutor", "Noor", "a chemistry doctorate"),
    ("lizard", "Ziggy", "shedding its skin"),
    ("friend", "Oksana", "getting married in June"),
    ("dog", "Biscuit", "scared of thunder"),
    ("goat", "Pepper", "eating the fence"),
    ("pen pal", "Haruki", "living in Sapporo"),
    ("niece", "Lottie", "starting kindergarten"),
]

TEMPORAL = [
    ("started learning the cello", "2026-03-14"),
    ("ran my first marathon", "2025-10-12"),
    ("planted the apple tree", "2024-04-02"),
    ("got my driving licence", "2019-07-23"),
    ("adopted the sourdough starter", "2026-01-09"),
    ("moved into the flat", "2023-09-01"),
    ("broke my wrist skiing", "2025-02-18"),
    ("quit smoking", "2022-05-30"),
    ("began the pottery course", "2026-06-05"),
    ("visited the glacier", "2024-08-11"),
    ("joined the choir", "2025-11-20"),
    ("sold the old motorbike", "2023-03-03"),
    ("finished the thesis", "2021-12-15"),
    ("painted the kitchen", "2026-02-27"),
    ("passed the sommelier exam", "2025-06-19"),
    ("climbed Ben Nevis", "2024-09-07"),
    ("bought the telescope", "2026-04-22"),
    ("learned to juggle", "2020-01-31"),
    ("renovated the attic", "2025-05-10"),
    ("started beekeeping", "2024-05-25"),
    ("went scuba diving", "2023-07-14"),
    ("built the treehouse", "2022-08-08"),
    ("opened the savings account", "2026-07-01"),
    ("swam across the lake", "2025-08-16"),
    ("met the ambassador", "2024-11-29"),
]

UPDATES = [
    ("tea", "jasmine", "rooibos"),
    ("band", "Radiohead", "Khruangbin"),
    ("film", "Amélie", "Paterson"),
    ("pizza topping", "mushroom", "anchovy"),
    ("podcast", "Radiolab", "Hardcore History"),
    ("board game", "Catan", "Wingspan"),
    ("cheese", "brie", "manchego"),
    ("season", "autumn", "spring"),
    ("painter", "Monet", "Hopper"),
    ("sport", "tennis", "climbing"),
    ("city", "Vienna", "Kyoto"),
    ("dessert", "tiramisu", "baklava"),
    ("poet", "Neruda", "Szymborska"),
    ("flower", "tulip", "peony"),
    ("font", "Helvetica", "Garamond"),
    ("beer", "pilsner", "saison"),
    ("bird", "robin", "kestrel"),
    ("novelist", "Austen", "Ishiguro"),
    ("fruit", "mango", "persimmon"),
    ("gemstone", "opal", "garnet"),
    ("car brand", "Volvo", "Skoda"),
    ("soup", "minestrone", "pho"),
    ("dance", "salsa", "tango"),
    ("spice", "cumin", "sumac"),
    ("island", "Crete", "Skye"),
]


@dataclass
class Planted:
    session: int
    text: str  # unique in the set: it identifies the stored message


@dataclass
class Question:
    kind: str
    text: str
    evidence: list[Planted]


@dataclass
class Dataset:
    sessions: list[list[str]] = field(default_factory=list[list[str]])  # user messages per session
    planted: list[Planted] = field(default_factory=list[Planted])
    questions: list[Question] = field(default_factory=list[Question])


def build(seed: int = 19, *, paraphrased: bool = False) -> Dataset:
    rng = random.Random(seed)
    data = Dataset(sessions=[[rng.choice(FILLER) for _ in range(FILLER_TURNS)] for _ in range(SESSIONS)])

    def plant(session: int, text: str) -> Planted:
        data.sessions[session].insert(rng.randrange(len(data.sessions[session]) + 1), text)
        item = Planted(session, text)
        data.planted.append(item)
        return item

    for thing, value in SINGLE:
        evidence = plant(rng.randrange(SESSIONS), f"For the record, my {thing} is {value}.")
        data.questions.append(Question("single-session", f"What is my {thing}?", [evidence]))

    def distract(text: str) -> None:
        session = data.sessions[rng.randrange(SESSIONS)]
        session.insert(rng.randrange(len(session) + 1), text)

    for relation, name, detail in MULTI:
        first, second = rng.sample(range(SESSIONS), 2)
        a = plant(min(first, second), f"I should mention my {relation} is called {name}.")
        b = plant(max(first, second), f"Did I tell you {name} is {detail}?")
        if paraphrased:
            distract(f"A stranger named {name} held the door for us this morning.")
            question = f"What have I said about {name} so far?"
        else:
            question = f"What do you know about my {relation} {name}?"
        data.questions.append(Question("multi-session", question, [a, b]))
    for event, day in TEMPORAL:
        evidence = plant(rng.randrange(SESSIONS), f"On {day} I {event}.")
        topic = event.rsplit(" ", 1)[-1]
        if paraphrased:
            distract(f"A colleague would not stop talking about a {topic} at lunch.")
            question = f"What was the date of that {topic} business?"
        else:
            question = f"When was it that I {event}?"
        data.questions.append(Question("temporal", question, [evidence]))
    for category, old, new in UPDATES:
        early, late = sorted(rng.sample(range(SESSIONS), 2))
        plant(early, f"My favourite {category} is {old}.")
        newer = plant(late, f"Update: my favourite {category} is now {new}, no longer {old}.")
        if paraphrased:
            distract(f"The shop on the corner had a sign about {category} in the window.")
            question = f"These days, which {category} do I like best?"
        else:
            question = f"What is my favourite {category} now?"
        data.questions.append(Question("knowledge-update", question, [newer]))
    return data
