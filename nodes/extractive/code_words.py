"""The word tables the extractive model reads a coding agent's work with: shell commands, tool names, prose cues.

Data only. `shell.py` reads commands, `trail.py` tool calls, `prose.py` and `worth.py` the agent's sentences,
`task.py` the first request; each table says who reads it. Everything here is lowercase.
"""

from __future__ import annotations

# ---- shell commands (`shell.py`): the program word of a simple command, its path as written stripped

# Commands that show a file: every file argument is read (`head -n 40 f` reads lines 1-40).
READERS = tuple("cat head tail less more nl bat wc view".split())
# Commands that search: their file arguments are searched, a pattern first (`grep -n pat f`).
SEARCHERS = tuple("grep egrep fgrep rg ag ack".split())
# Interpreters and runners: `python f.py` runs the file; `python -m pytest` is a test run.
INTERPRETERS = tuple("python python3 node ruby perl bash sh zsh php".split())
TEST_RUNNERS = tuple("pytest py.test tox nosetests".split())
TEST_MODULES = tuple("pytest unittest nose".split())  # `python -m MODULE` is a test run
# Words before the command proper (`time pytest`, `sudo cp …`, `env X=1 python …`).
PREFIX_COMMANDS = tuple("time sudo env nohup exec timeout xargs".split())
# Options whose value is the next word (not a file), per family of commands.
HEAD_OPTIONS = tuple("-n -c".split())
SEARCH_OPTIONS = tuple("-e -f -m -A -B -C --include --exclude --exclude-dir --type -g --glob".split())
SED_OPTIONS = tuple("-e -f -l --expression --file".split())
TEST_OPTIONS = tuple("-k -m -p -c -o -W -x --tb --maxfail --rootdir --deselect --ignore".split())

# ---- tool calls (`trail.py`): a tool's name says what it did to the path it was given

# Verbs in a tool's name (matched as word parts: `str_replace_editor`, `MultiEdit`, `read_file`), in the order
# they are tried: an edit wins over a read (`edit_file` reads too).
EDIT_VERBS = tuple("edit replace patch insert modify update apply multiedit notebookedit".split())
WRITE_VERBS = tuple("write create save new".split())
READ_VERBS = tuple("read view open cat show get".split())
SEARCH_VERBS = tuple("grep search find glob ls list".split())
TEST_VERBS = tuple("test tests pytest".split())
RUN_VERBS = tuple("run exec execute".split())
# Shell tools: their `command` argument is a command line (`bash`, `Bash`, `execute_bash`, `run_shell`).
SHELL_TOOLS = tuple("bash shell sh terminal execute_bash run_shell run_command exec_command".split())
# Tool-call argument keys that hold a command line.
COMMAND_KEYS = tuple("command cmd script".split())
# The `command` values of an editor tool that takes sub-commands (`str_replace_editor`), as a verb of EDIT/WRITE/READ.
EDITOR_COMMANDS = tuple("view create str_replace insert undo_edit".split())

# ---- the agent's sentences (`prose.py`)

# Program words that open a shell command written as a sentence (`Echo X && git add -A.`).
COMMAND_WORDS = tuple("""
cd ls cat sed grep python python3 pytest git pip echo mkdir rm cp mv nl head tail find chmod export source
npm npx yarn make docker curl wget awk touch ed tox node apt apt-get conda
""".split())
# Labels a ReAct agent writes before its reasoning (`THOUGHT: …`), dropped before a sentence is read.
THOUGHT_LABELS = tuple("thought thoughts reasoning analysis plan observation note".split())
# Words a sentence cannot end on (`… because we're looking for a`): the end of a clipped piece.
GLUE_ENDS = tuple("""
a an the and or of to in on for with by at from is are was were be this these that those as if then than but
so because when which who into onto my your our their its
""".split())
# A finding or a result (`worth.coding_worth`): what the agent learned or what happened.
FINDING_CUES = (
    "the issue is", "the problem is", "the bug is", "root cause", "this means", "this confirms", "confirms",
    "the fix", "turns out", "is caused by", "caused by", "fails because", "because", "instead of", "so the",
    "which means", "the reason", "expected", "should be", "must be",
)
RESULT_CUES = (
    "passes", "passed", "pass now", "all tests", "works", "worked", "fixed", "succeeds", "succeeded", "fails",
    "failed", "raises", "returns", "now", "no longer",
)
# Thinking aloud at a sentence's start (`Wait, …`, `Maybe the cache …`): a guess, not a finding.
HEDGES = (
    "wait", "hmm", "maybe", "perhaps", "i suspect", "i think", "i guess", "let's see", "ah", "oh", "actually", "if",
    "whoops", "oops", "ok", "okay", "now", "then", "i should", "i will", "i'll", "i need to", "i can", "let me",
)

# ---- the task (`task.py`)

# Wrapper blocks whose content is never the task (`<system-reminder>…</system-reminder>`; a coding agent's records
# of a slash command or a shell command the user ran — `<command-args>` is kept: it holds the command's request).
SKIPPED_BLOCKS = tuple(("system-reminder system caveat local-command-stdout local-command-stderr command-name "
                        "command-message bash-input bash-stdout bash-stderr").split())
# How user messages a harness writes begin (not the user's: no goal, correction or fact comes from them; the
# archive keeps them): a coding agent's note before replayed local commands, an agent loop's format error.
HARNESS_NOTES = (
    "caveat: the messages below were generated by the user while running local commands",
    "please always provide exactly one action in triple backticks",
)
# What makes a sentence of the first request a stated constraint or expectation (`… must not change the API`).
CONSTRAINT_CUES = (
    "must", "should", "do not", "don't", "never", "only", "make sure", "required", "expected", "avoid", "without",
)
