"""The word tables of the extractive model: cue words and phrases, stop words, date words.

Data only: one table per list, whitespace-separated words, or a tuple of phrases where entries hold
spaces. The modules that read sentences build their sets and regexes from these (`text.alternation`
escapes each entry and joins them with `|`); what is grammar rather than vocabulary (optional articles,
`I`/`we` + `'m`/` am`, any `-ed` word) stays in the regex next to its use. An alternation tries its
entries in table order, so a table's order is kept as written. Entries are lowercase (the regexes match
case-insensitively) unless the table says otherwise.
"""

from __future__ import annotations

# ---- dates (`text.DATE_RE`; the month names are search's, `state/search/words.py`)

WEEKDAYS = tuple("monday tuesday wednesday thursday friday saturday sunday".split())
# What a negated clause opens with (`text.overlaps`: an identifier in `not …` is no target).
NEGATIONS = ("not", "instead of", "rather than", "never")

# ---- stop words: one list per caller, each tuned to what that caller counts (merging any would change it)

# Keyword overlap (`text.keywords`, 4+ letters): the glue of a task or issue line, and the Open Issues
# section's own words (`todo`, `resolved`, `silently dropped, restored`), so a marker never makes an overlap.
# Not CONTENT_STOPWORDS: overlap still counts words like `thing`, `good`, `time` that a fact's worth ignores.
KEYWORD_STOPWORDS = frozenset("""
that this with from have should would could will what when where which there their them then than also
just into about does need needs still todo open question issue resolved silently dropped restored make
sure whether asked been being were your yours they
""".split())

# Content words (`worth.content_words`, 3+ letters): function words plus the chatter of a dialogue
# (`great`, `thanks`, `stuff`, `feel`), which says nothing a fact could be kept for.
CONTENT_STOPWORDS = frozenset("""
the a an and or but if then so as of to in on at by for with from into about over after before is are
was were be been being am do does did done has have had having will would shall should can could may might
must i me my mine we us our you your he him his she her it its they them their this that these those there
here what when where which who why how not no yes all any both each more most other some such only own same
than too very just also really much many lot lots thing things something anything everything stuff get got
getting go going gone went make made making take took feel felt think thought know knew see saw look
looking love loved like liked want wanted need needed way time day great good nice cool awesome amazing
wow yeah oh hey hi thanks thank glad happy fun sounds sound always never ever still even again back new
old big little one two
""".split())

# What a correction rejects (`cues.negated_terms`): a word after `not` / `instead of` that names nothing.
WEAK_TERMS = frozenset("""
a an the it that this them there here so yet sure really quite just only very much all now to be
anymore always never too
""".split())

# `Name: ` prefixes that are labels, not dialogue speakers (`transcript._mark_speakers`, lowercased).
NOT_SPEAKERS = frozenset("""
note notes todo fixme error warning summary update question answer result status step fix bug issue pr
task goal problem example traceback failed also yes no edit done reason cause solution next plan tip
important info debug output input http https
""".split())

# ---- sentence worth (`worth.py`)

# A decision or its reason (`worth.is_decision`).
DECISION_CUES = (
    "decided", "decide", "decision", "chose", "choose", "chosen", "because", "agreed", "settled on", "going with",
    "go with", "we'll use", "will use", "switch to", "switched to", "prefer", "instead of", "caused", "broke",
    "root cause", "due to",
)
# Discourse fillers trimmed off a kept fact's start (`worth.trim_filler`); `on a side note` and its kin are
# SIDE_NOTE_KINDS. Not REACTIONS: those do not trim, they lower a sentence's worth.
FILLERS = (
    "wow", "oh", "hey", "yeah", "yes", "yep", "so", "well", "anyway", "btw", "by the way", "also", "as for me",
    "honestly", "guess what", "speaking of which", "you know what",
)
# Talk about the talk itself (`worth.strip_meta_talk`): `since we last TALKED`, `long time no see`, `it's been
# AGES -`, a lone `SEE YA soon!`. The phrase is taken out; the rest of its sentence may still be a fact.
TALK_VERBS = ("talked", "chatted", "chat", "spoke", "caught up", "hung out", "saw each other")
LONG_WHILES = ("ages", "a while", "forever", "so long", "a long time")
FAREWELLS = ("see you", "see ya", "catch you", "catch ya", "talk soon", "talk later", "talk to you soon",
             "talk to you later")
SIDE_NOTE_KINDS = tuple("other another different related side".split())  # on (a |an )? KIND note
# Things that happened (`worth._EVENT_RE`; any other `-ed` word counts too). Not `tracking`'s past-tense
# words: those tell a plan done, these make a sentence worth keeping.
EVENT_VERBS = tuple("""
went got made started finished bought took visited joined won tried learned found saw met adopted
painted wrote ran moved played built gave lost left sold
""".split())
# Feelings (`worth._FEELING_RE`) lower a sentence's worth, and so does addressing the listener (SECOND_PERSON).
FEELING_WORDS = tuple("""
feel feels felt feeling emotion emotions happy proud excited grateful glad thrilled stoked blessed
""".split())
# What someone likes (`worth._PREFERENCE_RE`): a favourite dish or film is a fact worth keeping.
PREFERENCES = tuple("favorite favorites favourite favourites enjoy enjoys love loves".split())  # `prefer`: a decision
# Case-sensitive (`I`, not `i`; `My` and `we`, not `MY`): the speaker's own words.
FIRST_PERSON = tuple("I I'm I've I'd I'll me my My we We our Our us".split())
SECOND_PERSON = tuple("you your you're you've".split())
# A reply's opening reaction (`worth.REACTION_RE`; `aw`, `aww`… count too).
REACTIONS = (
    "wow", "oh", "haha", "yeah", "yes", "yep", "thanks", "thank you", "congrats", "congratulations", "that's",
    "that is", "that sounds", "sounds", "what a", "so glad", "hey", "hi", "hello", "glad", "good luck", "great",
    "awesome", "cool", "nice", "amazing", "sure", "no worries", "take care", "bye", "see you", "you", "your",
)
# Time words raise it (`worth._TIME_RE`).
TIME_WORDS = tuple("yesterday today tomorrow tonight last ago next week weekend month year since until".split())

# ---- sentence cues (`cues.py`)

# Greeting and linking words before the sentence proper (`cues.LEAD_RE`, repeated: `OK, so, now …`), stripped
# before a request or a title is read.
LEAD_WORDS = (
    "hi", "hello", "hey", "ok", "okay", "so", "also", "and", "but", "now", "then", "great", "good", "thanks",
    "one more thing", "one more rule",
)
# A request's openers, polite and imperative alike (`Please …`, `Can you …`).
REQUEST_OPENERS = ("please", "can you", "could you", "would you")
POLITE_OPENERS = (*REQUEST_OPENERS, "i need you to", "i want you to", "help me", "i'd like you to")
IMPERATIVES = (*REQUEST_OPENERS, "let's", "let us", "make sure", *"""
add fix implement create update change remove delete write put use return keep leave log deploy detect skip
check run rename move refactor document investigate support handle find show explain build migrate test
switch send ask
""".split())
# Corrections and switches opening a sentence (`No,` `Actually,` `Instead,`), dropped before the cue is read.
OPENERS = tuple("no nope actually instead".split())
WANT_CUES = ("please", "i want", "i need", "we need", "i'd like", "should", "must")
# Small talk that looks like a request (`Keep it up!`, `Check it out`); pictures asked for are `send (me) a pic`.
SOCIAL_PHRASES = (
    "keep it up", "keep up", "keep going", "keep on", "keep at it", "keep me posted", "keep me updated",
    "keep in touch", "keep doing", "keep trying", "keep pushing", "keep rocking", "keep that",
    "check it out", "check this out", "check that out", "check them out", "let me know", "take care", "have fun",
    "have a great", "have a good", "have a nice", "enjoy", "tell me more", "tell me about", "show me",
    "let's catch up", "let's keep", "let's hope", "let's do this", "make sure to take", "make sure to have",
    "make sure to enjoy", "don't worry", "don't forget", "don't give up", "don't hesitate", "don't stop",
)
PICTURES = tuple("pic photo picture".split())  # send (me )?(a |some )?PICTURE(s)?
# A whole short acknowledgement (`cues.is_ack`: at most three words). Not REACTIONS: those open longer replies.
ACKS = (
    "thanks", "thank you", "ok", "okay", "great", "good", "cool", "perfect", "nice", "sounds good", "go ahead",
    "yes", "yep", "sure",
)
# A plan (`cues.is_plan`): I'm / we are … PLANNING, I / we PLAN_VERB to, my / our PLAN_NOUN is / was,
# I'll / we will FUTURE_PLAN, `I'm gonna`, next PLAN_PERIOD.
PLANNING = (
    "planning", "going to", "hoping", "aiming", "thinking about", "thinking of", "looking to", "about to",
    "getting ready to", "saving for", "saving up for",
)
PLAN_VERBS = tuple("plan hope intend want aim".split())
PLAN_NOUNS = ("goal", "plan", "dream", "aim", "next step")
FUTURE_PLANS = (
    "be starting", "be going", "be moving", "be visiting", "be taking", "be joining", "start", "finally",
)
PLAN_PERIODS = tuple("week month year weekend".split())
# A sentence that contradicts what was said before: its opening word (followed by punctuation), or
# `that's` / `that is` + THAT_IS_WRONG.
CORRECTION_OPENERS = ("no", "nope", "wrong", "incorrect", "not quite", "not really right", "correction")
THAT_IS_WRONG = ("not right", "not correct", "not true", "not what", "wrong", "incorrect")
# What `don't …` / `never …` forbids doing (a correction, and the term it rejects).
DONT_ACTIONS = tuple("""
touch use change modify edit call read add put move remove delete commit push deploy merge rename run
install upgrade return raise log send write store cache hardcode copy
""".split())
# A TODO or an explicitly open point (`cues.is_issue`).
ISSUE_CUES = (
    "todo", "fixme", "open question", "unresolved", "still open", "still unclear", "tbd", "to be decided",
    "follow-up", "follow up", "need to check", "need to confirm", "need to decide", "need to verify",
    "need to find out", "need to ask",
)
# The next step announced (`cues.is_next_step`): at the start (as a prefix: `todo` is also `todos:`), or
# NEXT_ANYWHERE as words anywhere; a sentence opening with the word `next` counts too.
NEXT_OPENERS = (
    "let me", "let's", "now the", "now i", "now let", "then i", "i'll", "i will", "i'm going to", "we'll",
    "remaining", "still open", "todo", "for tomorrow", "tomorrow",
)
NEXT_ANYWHERE = ("let me", "remaining before", "next step")
# Something reported done (`cues.reports_done`): these words, `is / are (now) DONE_PARTICIPLES`, `… now`
# after any `-ed` word, or `is / are / was / were (now) FINISHED_FORMS` (any `-ed` word too) not followed by
# NOT_DONE_AFTER.
DONE_WORDS = (
    "fixed", "resolved", "solved", "done", "works now", "working now", "pass now", "passes now", "now pass",
    "now passes", "passing", "answered", "settled", "closed", "completed", "finished", "confirmed", "now import",
    "now imports", "now works", "now handles", "now detects", "now returns", "now means",
)
DONE_PARTICIPLES = tuple("updated handled implemented added written fixed".split())
FINISHED_FORMS = tuple("written done rewritten built".split())
NOT_DONE_AFTER = tuple("to by that if when".split())  # `was designed to …` is a purpose, not a report
# A report of work done opening a sentence (`Added the check.`, `We fixed …`).
REPORTS = tuple("""
added updated fixed rewrote wrote created implemented removed renamed moved replaced switched changed made
built deployed merged documented refactored finished completed checked verified tested reviewed cleaned
answered resolved ran
""".split())

# ---- fact subjects (`facts._SUBJECT_RE`: `[the] SUBJECT is / stays / = VALUE`)

SUBJECT_DETERMINERS = tuple("the our my his her their its".split())
COPULAS = ("is", "are", "was", "were", "=", "stays", "remains", "becomes", "became", "equals")
# A subject that is only a pronoun names nothing a newer fact could supersede.
SUBJECT_PRONOUNS = frozenset("i it this that he she they we you there what which who everything something".split())

# ---- goals done in a dialogue (`tracking._PAST_RE`; any other `-ed` word counts too)

PAST_WORDS = tuple("""
went did finally got made finished started tried visited joined bought took had was were saw met
""".split())

# ---- artifacts (`artifacts.py`)

# Case-sensitive suffixes of an exception's class name (`KeyError:`, `SystemExit:`, `AssertionFailure:`).
EXCEPTION_SUFFIXES = tuple("Error Exception Exit Interrupt Failure".split())
ERROR_WORDS = tuple("error fatal".split())  # a line opening `error:` / `fatal:`
# Tool-call argument keys whose values are paths (matched anywhere in the key: `file_path`, `target_dir`).
PATH_KEYS = tuple("path file dir url uri target source dest".split())
