"""Irregular English word forms (SPEC §7 [r2]): what the porter stemmer cannot relate.

Porter strips suffixes, so `buys`/`buying` meet `buy`, but `bought` never does, nor `children` and
`child`. A query word of one of these groups also looks for the group's other forms (`search_candidates`
weighs them LEMMA_WEIGHT), so "what did she buy" finds "I bought a kayak". The table is the common
irregular verbs and nouns of English grammar — nothing here comes from any conversation.
"""

from __future__ import annotations

_GROUPS = """
arise arose arisen|awake awoke awoken|be was were been|bear bore borne|beat beaten|become became|begin began begun
bend bent|bite bitten|bleed bled|blow blew blown|break broke broken|breed bred|bring brought
build built|burn burnt|buy bought|catch caught|choose chose chosen|cling clung|come came|creep crept|deal dealt
dig dug|do did done|draw drew drawn|dream dreamt|drink drank drunk|drive drove driven|eat ate eaten|fall fell fallen
feed fed|feel felt|fight fought|find found|flee fled|fly flew flown|forbid forbade forbidden|forget forgot forgotten
forgive forgave forgiven|freeze froze frozen|get got gotten|give gave given|go went gone|grow grew grown
hang hung|have had|hear heard|hide hid hidden|hold held|keep kept|kneel knelt|know knew known|lay laid
lead led|lean leant|leap leapt|learn learnt|leave left|lend lent|light lit|lose lost|make made
mean meant|meet met|overcome overcame|pay paid|prove proven|ride rode ridden|ring rang rung
rise rose risen|run ran|say said|see saw seen|seek sought|sell sold|send sent|sew sewn|shake shook shaken
shine shone|shoot shot|show shown|shrink shrank shrunk|sing sang sung|sink sank sunk|sit sat|sleep slept
slide slid|speak spoke spoken|speed sped|spend spent|spin spun|spit spat|spring sprang sprung
stand stood|steal stole stolen|stick stuck|sting stung|stink stank stunk|strike struck|strive strove striven
swear swore sworn|sweep swept|swim swam swum|swing swung|take took taken|teach taught|tear tore torn|tell told
think thought|throw threw thrown|understand understood|undertake undertook undertaken|wake woke woken|wear wore worn
weave wove woven|weep wept|win won|withdraw withdrew withdrawn|write wrote written
child children|person people|man men|woman women|foot feet|tooth teeth|goose geese|mouse mice|ox oxen
wife wives|knife knives|life lives|leaf leaves|wolf wolves|half halves|shelf shelves|thief thieves|loaf loaves
calf calves|elf elves|scarf scarves|hoof hooves|cactus cacti|fungus fungi|criterion criteria|phenomenon phenomena
analysis analyses|crisis crises|thesis theses|datum data|medium media
two 2|three 3|four 4|five 5|six 6|seven 7|eight 8|nine 9|ten 10|eleven 11|twelve 12|twenty 20|fifty 50|hundred 100
first 1st|second 2nd|third 3rd|fourth 4th|fifth 5th|sixth 6th|seventh 7th|eighth 8th|ninth 9th|tenth 10th
"""
_FORMS: dict[str, tuple[str, ...]] = {}
for _group in _GROUPS.replace("\n", "|").split("|"):
    _words = tuple(_group.split())
    for _word in _words:
        _FORMS.setdefault(_word, tuple(w for w in _words if w != _word))


def other_forms(word: str) -> tuple[str, ...]:
    """The other forms of an irregular word's group (`bought` → `buy`), () for any other word."""
    return _FORMS.get(word, ())
