"""The word tables of archive search: function words, month names, clitics, irregular forms.

Data only, one whitespace-separated table per list; the modules that match with them build their sets
and regexes from these (`fts_query`, `search_dates`, `search_lemmas`). Everything here is lowercase:
search compares lowercased letter/digit runs.
"""

from __future__ import annotations

# English function words (the usual IR list, contraction stems included): never what a search is about.
# Not graphs/eval's question-keyword list (it also drops `kind`, `type`, `thing`… and is frozen by a
# snapshot) nor the guards' anchor stopwords (those are capitalised words that are not names).
STOPWORDS = frozenset("""
a about above after again against all am an and any are aren as at be because been before being below between
both but by can cannot could couldn did didn do does doesn doing don down during each few for from further had
hadn has hasn have haven having he her here hers herself him himself his how i if in into is isn it its itself
just let me more most mustn my myself no nor not now of off on once only or other ought our ours ourselves out
over own same shan she should shouldn so some such than that the their theirs them themselves then there these
they this those through to too under until up very was wasn we were weren what when where which while who whom
why will with would wouldn you your yours yourself yourselves
""".split())

# The twelve month names, in calendar order: also the guards' anchor dates and the extractive model's dates.
MONTH_NAMES = tuple("""
january february march april may june july august september october november december
""".split())
# Their short forms as written in date stamps (`may` is its own short form, so it is not repeated).
MONTH_ABBREVIATIONS = tuple("jan feb mar apr jun jul aug sep sept oct nov dec".split())

# English clitics dropped after a letter/digit run (`Joanna's` → `joanna`, `don't` → `don`, `we'll` → `we`).
CLITICS = tuple("s t d m ll re ve".split())

# Irregular English word forms, one group per `|`: the common irregular verbs and nouns of English grammar,
# number words and ordinals (nothing here comes from any conversation). `search_lemmas` reads it.
IRREGULAR_FORMS = """
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
