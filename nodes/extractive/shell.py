"""What a shell command line did to files, for the extractive model's artifact trail: read, edited, created, ran.

A command line is split into simple commands (newlines, `&&`, `||`, `;`, pipes) with `shlex`; heredoc bodies
are taken out first and given to the command that reads them (`cat <<EOF > f.py` creates `f.py`; a shell
script's body is read as commands, a Python script's for the files it opens for writing). Each simple
command's program word decides: `cat`/`head`/`nl`/`sed -n 'A,Bp'` read (with the line range when the
command names one), `sed -i`/`ed` edit, `>`/`>>`/`tee`/`touch`/`cp` write, `python f.py` and `./f.sh` run,
`pytest`/`python -m pytest` test. Anything unknown touches nothing: a path only listed by `ls` or `find`
is not a file the agent worked on.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass
from typing import Literal

from workmem.nodes.extractive.code_words import (
    HEAD_OPTIONS,
    INTERPRETERS,
    PREFIX_COMMANDS,
    READERS,
    SEARCH_OPTIONS,
    SEARCHERS,
    SED_OPTIONS,
    TEST_MODULES,
    TEST_OPTIONS,
    TEST_RUNNERS,
)

Kind = Literal["edited", "changed", "created", "restored", "read", "searched", "ran", "tested", "removed"]

_HEREDOC_RE = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][\w]*)\1")
_OPERATORS = {"&&", "||", ";", "|", "&", "(", ")", ";;"}
_REDIRECTS = {">", ">>", ">|", "&>", "&>>"}
_SED_LINES_RE = re.compile(r"^(\d+)(?:\s*,\s*(\d+|\$))?\s*([acidp]|c\\?|s\W)?")
_ED_LINE_RE = re.compile(r"^(\d+)(?:,(\d+))?[acid]$")
_HEAD_N_RE = re.compile(r"^-n?(\d+)$")
_OPEN_WRITE_RE = re.compile(r"""open\(\s*(?:r|f)?(['"])([^'"\n]+)\1\s*,\s*(['"])[^'"]*[wa+][^'"]*\3""")
_ASSIGN_RE = re.compile(r"""^[ \t]*([A-Za-z_]\w*)[ \t]*=[ \t]*r?(['"])([^'"\n]+)\2[ \t]*$""", re.M)
_OPEN_NAME_WRITE_RE = re.compile(r"""open\(\s*([A-Za-z_]\w*)\s*,\s*(['"])[^'"]*[wa+][^'"]*\2""")
_WRITE_TEXT_RE = re.compile(r"""Path\(\s*(['"])([^'"\n]+)\1\s*\)\.write_(?:text|bytes)""")
# A Windows path in a command line (`C:\Users\jim\x`, two levels at least: not a regex's `a:\d`): shlex would eat
# its backslashes.
_DRIVE_PATH = re.compile(r"(?<![^\s'\"=])[A-Za-z]:\\[^\s'\"|&;<>()*?\\]+(?:\\[^\s'\"|&;<>()*?\\]*)+")
_DRIVE_ROOT = re.compile(r"^[A-Za-z]:/")
_WINDOWS_PATH = re.compile(r"^[A-Za-z]:\\[^*?\"<>|]*$")
_RELATIVE_WINDOWS_PATH = re.compile(r"^[\w.-]+(?:\\[\w .-]+)+$")
_GLOB_CHARS = set("*?[]{}$`<>|\\")
_SCRIPT_EXT = re.compile(r"\.(?:py|sh|bash|js|ts|rb|pl)$")
DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")  # a test module or test id named by dots
_NOT_PATH = re.compile(r"^(?:-|/dev/|&|\d+$|https?://)")


@dataclass(frozen=True)
class Touch:
    """One thing a command did to one path: its kind, the lines it named, the command or script behind it."""

    path: str
    kind: Kind
    lines: tuple[int, int] | None = None
    detail: str = ""


def is_absolute(path: str) -> bool:
    """A path from the root, the home directory (`~`) or a Windows drive (`C:/…`, as `clean_path` writes it)."""
    return path.startswith(("/", "~")) or bool(_DRIVE_ROOT.match(path))


def clean_path(token: str) -> str | None:
    """A path as the trail keeps it (`./a/b.py` → `a/b.py`), or None for options, devices, globs and URLs."""
    token = token.strip().strip("'\"").rstrip(",;")
    if _WINDOWS_PATH.match(token) or _RELATIVE_WINDOWS_PATH.match(token):  # `C:\Users\jim\app.py` is kept as
        token = token.replace("\\", "/")  # `C:/Users/jim/app.py`, `tests\test_a.py` as `tests/test_a.py`
    if not token or _NOT_PATH.match(token) or any(c in _GLOB_CHARS for c in token) or token in (".", "..", "~"):
        return None
    while token.startswith("./"):
        token = token[2:]
    token = token.rstrip("/")
    return token if token and not token.startswith("=") and "=" not in token.split("/")[0] else None


def _heredocs(text: str) -> tuple[str, list[str]]:
    """The command text without heredoc bodies, and the bodies in order (the command keeps `<< EOF`)."""
    out: list[str] = []
    bodies: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        for match in _HEREDOC_RE.finditer(line):
            end, body = match.group(2), []
            while i < len(lines) and lines[i].strip() != end:
                body.append(lines[i])
                i += 1
            i += 1
            bodies.append("\n".join(body))
    return "\n".join(out), bodies


def _words(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        words = list(lexer)
    except ValueError:  # an unclosed quote (a clipped command): plain words are good enough
        return [w.strip("'\"") for w in line.split()]
    merged: list[str] = []
    for word in words:  # `2>&1` and `2> log` arrive as `2`, `>&`, `1`: the fd belongs to its redirect
        if merged and merged[-1].isdigit() and len(merged[-1]) == 1 and word in (">", ">>", ">&"):
            merged[-1] = merged[-1] + word
        else:
            merged.append(word)
    return merged


Pipeline = list[list[str]]


def logical_lines(text: str) -> list[str]:
    """The command lines of `text`: split at newlines outside quotes (`python -c "…"` spans lines); a comment
    (`# let's …`) runs to its line's end, its quotes none."""
    lines, current, quote, escaped, comment = [], [], "", False, False
    for char in text:
        if comment and char != "\n":
            pass
        elif escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (not current or current[-1] in " \t;&|("):
            comment = True
        elif char == "\n":
            lines.append("".join(current))
            current, comment = [], False
            continue
        current.append(char)
    lines.append("".join(current))
    return lines


def simple_commands(text: str) -> tuple[list[tuple[str, list[Pipeline]]], list[str]]:
    """Each command line (as written) with its pipelines of simple commands (word lists), and the heredoc
    bodies in the order the commands read them."""
    text, bodies = _heredocs(_DRIVE_PATH.sub(lambda m: m.group(0).replace("\\", "/"), text.replace("\\\n", " ")))
    out: list[tuple[str, list[Pipeline]]] = []
    for line in logical_lines(text):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        pipelines: list[Pipeline] = [[[]]]
        for word in _words(line):
            if word == "|":
                pipelines[-1].append([])
            elif word in _OPERATORS:
                pipelines.append([[]])
            else:
                pipelines[-1][-1].append(word)
        out.append((line.strip(), [kept for p in pipelines if (kept := [cmd for cmd in p if cmd])]))
    return out, bodies


def _split_redirects(words: list[str]) -> tuple[list[str], list[str], bool]:
    """Arguments, the files written by `>`/`>>`, and whether the command reads a heredoc (`<<`)."""
    args, written, heredoc = [], [], False
    skip = False
    for i, word in enumerate(words):
        if skip:
            skip = False
            continue
        if word.lstrip("0123456789") in (*_REDIRECTS, "<", "<<", "<<-", ">&", "<&", "<<<"):
            target = words[i + 1] if i + 1 < len(words) else ""
            if word in _REDIRECTS and (path := clean_path(target)):  # `2> log` is a log, not a file made
                written.append(path)
            heredoc |= word in ("<<", "<<-")
            skip = True
        else:
            args.append(word)
    return args, written, heredoc


def _program(args: list[str]) -> tuple[str, str, list[str]]:
    """The program word (its base name), as written, and its arguments (`time`, `sudo`, `X=1` skipped)."""
    while args and (args[0] in PREFIX_COMMANDS or re.fullmatch(r"[A-Za-z_]\w*=\S*", args[0])
                    or (args[0].isdigit() and len(args) > 1)):
        args = args[1:]
    if not args:
        return "", "", []
    return args[0].rsplit("/", 1)[-1], args[0], args[1:]


def _operands(args: list[str], valued: tuple[str, ...] = ()) -> list[str]:
    """Non-option words (an option in `valued` takes the next word with it)."""
    out, skip = [], False
    for word in args:
        if skip:
            skip = False
        elif word in valued:
            skip = True
        elif not word.startswith("-"):
            out.append(word)
    return out


def _paths(words: list[str]) -> list[str]:
    return [p for w in words if (p := clean_path(w))]


def sed_lines(script: str) -> tuple[int, int] | None:
    """The line range a sed script addresses (`'308,312c…'`, `'388i…'`, `'10,20p'`), or None."""
    found = _SED_LINES_RE.match(script.strip())
    if not found or found.group(2) == "$":
        return None
    start = int(found.group(1))
    return start, int(found.group(2)) if found.group(2) else start


def _sed_parts(args: list[str]) -> tuple[str, list[str]]:
    """The sed script and the files of a sed command."""
    scripts = [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-e", "--expression")]
    ops = _operands([a for a in args if not re.fullmatch(r"-i\S*|--in-place\S*", a)], SED_OPTIONS)
    if scripts or any(a in ("-f", "--file") for a in args):  # the script is given by option: all else are files
        return (scripts[0] if scripts else ""), ops
    return (ops[0], ops[1:]) if ops else ("", [])


def _sed(args: list[str], line: str) -> list[Touch]:
    in_place = any(re.fullmatch(r"-i\S*|--in-place\S*", a) for a in args)
    quiet = any(a in ("-n", "--quiet", "--silent") or re.fullmatch(r"-[a-zE]*n[a-zE]*", a) for a in args)
    script, files = _sed_parts(args)
    lines = sed_lines(script) if in_place or quiet else None
    kind: Kind = "edited" if in_place else "read"
    return [Touch(p, kind, lines, line if in_place else "") for p in _paths(files)]


def _head_lines(args: list[str]) -> tuple[int, int] | None:
    for i, word in enumerate(args):
        found = _HEAD_N_RE.match(word) if word != "-n" else None
        if word == "-n" and i + 1 < len(args) and args[i + 1].isdigit():
            return 1, int(args[i + 1])
        if found and word.startswith("-"):
            return 1, int(found.group(1))
    return None


def script_writes(body: str) -> list[str]:
    """Files a Python script opens for writing (`open('f', 'w')`, `Path('f').write_text`), also through a name
    the script assigns the path to (`path = 'f'` … `open(path, 'w')`)."""
    found = [m.group(2) for m in _OPEN_WRITE_RE.finditer(body)] + [m.group(2) for m in _WRITE_TEXT_RE.finditer(body)]
    assigned = sorted([(m.start(), m.group(1), m.group(3)) for m in _ASSIGN_RE.finditer(body)])
    for m in _OPEN_NAME_WRITE_RE.finditer(body):  # the name's value where the script opens it
        value = next((v for at, name, v in reversed(assigned) if at < m.start() and name == m.group(1)), None)
        if value is not None:
            found.append(value)
    return list(dict.fromkeys(p for f in found if (p := clean_path(f))))


def _body_touches(target: str | None, body: str, line: str) -> list[Touch]:
    """What a heredoc body does: a script written to `target` (a shell script's own commands create files, a
    Python script's writes edit them), or a script fed straight to an interpreter (`python - <<EOF`)."""
    out: list[Touch] = []
    name = target or "an inline script"
    if target is None or target.endswith((".py", ".pyw")):
        out += [Touch(p, "edited", None, name) for p in script_writes(body)]
    if target is not None and target.endswith((".sh", ".bash")):
        for touch in command_touches(body):
            if touch.kind in ("created", "edited"):
                out.append(Touch(touch.path, "created", None, name))
    return out


def _test_targets(args: list[str]) -> list[str]:
    """The test files a test run names (`tests/test_a.py::test_b` → `tests/test_a.py`), and dotted test names
    (`tests.test_a.TestB`: the trail finds their file among the files it knows)."""
    return list(dict.fromkeys(p for w in _operands(args, TEST_OPTIONS) if (p := clean_path(w.split("::")[0]))
                              and ("/" in p or _SCRIPT_EXT.search(p) or DOTTED_NAME.fullmatch(p))))


def _one(program: str, written_as: str, args: list[str], line: str, body: str | None) -> list[Touch]:
    """The touches of one simple command (`line`: the command as written, kept as the detail of edits and runs)."""
    ops = _operands(args, HEAD_OPTIONS)
    if program in READERS:
        lines = _head_lines(args) if program == "head" else None
        return [Touch(p, "read", lines) for p in _paths(ops)]
    if program == "sed":
        return _sed(args, line)
    if program in SEARCHERS:
        found = _operands(args, SEARCH_OPTIONS)
        files = found if any(a in ("-e", "-f") for a in args) else found[1:]
        return [Touch(p, "searched") for p in _paths(files) if "." in p.rsplit("/", 1)[-1]]
    if program in ("ed", "ex"):
        first = (body or "").strip().split("\n", 1)[0]
        found = _ED_LINE_RE.match(first)
        lines = (int(found.group(1)), int(found.group(2) or found.group(1))) if found else None
        return [Touch(p, "edited", lines, line) for p in _paths(ops[:1])]
    if program in ("cp", "mv", "install") and len(ops) >= 2:
        source, dest = _paths(ops[:1]), _paths(ops[-1:])
        if source and dest:
            if dest[0].startswith(source[0]):  # `cp f f.backup`: a backup of f, f itself unchanged
                return [Touch(source[0], "read", None, line)]
            kind: Kind = "restored" if source[0].startswith(dest[0]) else "created"
            return [Touch(dest[0], kind, None, line)]
    if program in ("touch", "tee"):
        return [Touch(p, "created", None, line) for p in _paths(ops)]
    if program == "rm":
        return [Touch(p, "removed") for p in _paths(ops)]
    if program in TEST_RUNNERS:
        return [Touch(p, "tested", None, line) for p in _test_targets(args)] or []
    if program in INTERPRETERS or re.fullmatch(r"python\d(?:\.\d+)?", program):
        if "-m" in args:
            module = args[args.index("-m") + 1] if args.index("-m") + 1 < len(args) else ""
            rest = args[args.index("-m") + 2:]
            return [Touch(p, "tested", None, line) for p in _test_targets(rest)] if module in TEST_MODULES else []
        if "-c" in args:
            code = args[args.index("-c") + 1] if args.index("-c") + 1 < len(args) else ""
            return [Touch(p, "edited", None, "an inline script") for p in script_writes(code)]
        scripts = [p for p in _paths(ops) if _SCRIPT_EXT.search(p)]
        if scripts:
            kind = "tested" if re.search(r"(?:^|/)test_[^/]*$|_test\.\w+$", scripts[0]) else "ran"
            return [Touch(scripts[0], kind, None, line)]
        return [] if body is None else _body_touches(None, body, line)
    if _SCRIPT_EXT.search(program) and "/" in written_as:  # `./repro.sh`, `scripts/check.py`
        return [Touch(p, "ran", None, line) for p in _paths([written_as])]
    return []


def _moved(here: str, target: str) -> str:
    """The directory after `cd target` from `here` (relative to where the command started; '' when unknown or
    absolute: absolute directories are the trail's roots)."""
    if not target or target.startswith(("-", "$")) or is_absolute(target):
        return ""
    moved = posixpath.normpath(posixpath.join(here or ".", target))
    return "" if moved == "." or moved.startswith("..") else moved


def _under(here: str, touches: list[Touch]) -> list[Touch]:
    if not here:
        return touches
    return [t if is_absolute(t.path) else Touch(posixpath.join(here, t.path), t.kind, t.lines, t.detail)
            for t in touches]


def command_touches(command: str) -> list[Touch]:
    """Every touch of a command line, in order (a heredoc-fed `cat > f` creates `f`, its script body read);
    paths after a relative `cd sub` are written from where the command started (`sub/f`)."""
    lines, bodies = simple_commands(command)
    out: list[Touch] = []
    next_body = iter(bodies)
    here = ""
    for line, pipelines in lines:
        for pipeline in pipelines:
            for position, words in enumerate(pipeline):
                args, written, heredoc = _split_redirects(words)
                program, written_as, rest = _program(args)
                body = next(next_body, "") if heredoc else None
                if program == "cd":
                    here = _moved(here, rest[0] if rest else "")
                    continue
                if position and program == "sed" and out and out[-1].kind == "read":
                    # `nl -ba f | sed -n '10,20p'`: the range applies to the file the pipe reads
                    shown = sed_lines(_sed_parts(rest)[0])
                    if shown and not _sed_parts(rest)[1]:
                        out[-1] = Touch(out[-1].path, "read", shown, out[-1].detail)
                    continue
                found = _one(program, written_as, rest, line, body)
                for path in written:
                    found.append(Touch(path, "created", None, line))
                    if body is not None:
                        found += _body_touches(path, body, line)
                out += _under(here, found)
    return out


def cd_dirs(command: str) -> list[str]:
    """The absolute directories a command line changes into (`cd /testbed && …`): paths under them are
    written relative to them elsewhere."""
    lines, _ = simple_commands(command)
    return [words[1].rstrip("/") for _, pipelines in lines for pipeline in pipelines for words in pipeline
            if len(words) >= 2 and words[0] == "cd" and is_absolute(words[1]) and not words[1].startswith("~")
            and len(words[1]) > 1]
