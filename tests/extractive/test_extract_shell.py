"""What a shell command line did to files (nodes/extractive/shell.py): read, edited, created, ran, tested."""

from __future__ import annotations

import pytest

from workmem.nodes.extractive.shell import Touch, cd_dirs, clean_path, command_touches, logical_lines, script_writes


def kinds(command: str) -> list[tuple[str, str, tuple[int, int] | None]]:
    return [(t.path, t.kind, t.lines) for t in command_touches(command)]


@pytest.mark.parametrize(("command", "expected"), [
    ("cat src/app.py", [("src/app.py", "read", None)]),
    ("head -n 40 setup.py", [("setup.py", "read", (1, 40))]),
    ("sed -n '261,270p' src/_pytest/skipping.py", [("src/_pytest/skipping.py", "read", (261, 270))]),
    ("nl -ba src/main.py | sed -n '632,650p'", [("src/main.py", "read", (632, 650))]),
    ("grep -n 'def reindl' ./pvlib/irradiance.py", [("pvlib/irradiance.py", "searched", None)]),
    ("grep -rn 'x' src/ --include='*.py'", []),  # a directory searched: no file
    ("sed -i 's/np\\.Inf/np.inf/g' ./pvlib/pvsystem.py", [("pvlib/pvsystem.py", "edited", None)]),
    ("sed -i '308,312c\\    x = 1' astroid/modutils.py", [("astroid/modutils.py", "edited", (308, 312))]),
    ("sed -i '117i \\    print(n)' tests/test_a.py", [("tests/test_a.py", "edited", (117, 117))]),
    ("ed src/main.py <<EOF\n514a\n    pass\n.\nw\nEOF", [("src/main.py", "edited", (514, 514))]),
    ("cp ./app/static.py.backup ./app/static.py", [("app/static.py", "restored", None)]),
    ("cp app/static.py app/static.py.bak", [("app/static.py", "read", None)]),  # a backup leaves the file as is
    ("pytest testing/test_skipping.py -x", [("testing/test_skipping.py", "tested", None)]),
    ("python -m pytest tests/t.py::test_a -k fast", [("tests/t.py", "tested", None)]),
    ("python3 reproduce.py", [("reproduce.py", "ran", None)]),
    ("./scripts/check.sh", [("scripts/check.sh", "ran", None)]),
    ("rm -f tmp/out.txt", [("tmp/out.txt", "removed", None)]),
    ("ls -la src && find . -name '*.py' | head", []),  # listings touch nothing
    ("echo done > /dev/null 2>&1", []),
])
def test_one_command(command, expected):
    assert kinds(command) == expected


def test_a_heredoc_creates_its_file_and_a_python_body_edits_the_files_it_opens_for_writing():
    command = ("cat > fix.py << 'EOF'\nwith open('./pkg/mod.py', 'r') as f:\n    text = f.read()\n"
               "with open('./pkg/mod.py', 'w') as f:\n    f.write(text)\nEOF\npython fix.py")
    assert [(t.path, t.kind, t.detail) for t in command_touches(command)] == [
        ("fix.py", "created", "cat > fix.py << 'EOF'"), ("pkg/mod.py", "edited", "fix.py"),
        ("fix.py", "ran", "python fix.py")]


def test_a_shell_script_body_creates_its_files_where_it_changes_into():
    command = ("cat <<'EOF' > repro.sh\nmkdir -p work\ncd work\necho 'assert 0' > pkg/__init__.py\nEOF\n"
               "chmod +x repro.sh\n./repro.sh")
    assert kinds(command) == [("repro.sh", "created", None), ("work/pkg/__init__.py", "created", None),
                              ("repro.sh", "ran", None)]


def test_a_relative_cd_puts_later_paths_under_it_and_an_absolute_one_is_a_root():
    assert kinds("cd sub && cat a.py && cd .. && cat b.py") == [("sub/a.py", "read", None), ("b.py", "read", None)]
    assert kinds("cd /testbed && cat a.py") == [("a.py", "read", None)]
    assert cd_dirs("cd /testbed && cat a.py; cd /srv/app/ && ls") == ["/testbed", "/srv/app"]


def test_runs_and_tests_keep_the_command_line_as_written():
    line = "cd /testbed && python -m pytest tests/t.py -xvs 2>&1 | head -100"
    assert command_touches(line) == [Touch("tests/t.py", "tested", None, line)]


def test_quoted_code_spans_lines_and_its_symbols_are_no_redirects():
    command = 'python3 -c "\nimport x\nif len(x) > 5:\n    print(x)\n"'
    assert logical_lines(command) == [command]
    assert command_touches(command) == []


def test_an_unclosed_quote_of_a_clipped_command_still_reads():
    assert kinds("sed -n '10,20p' app/x.py && echo 'unfinished") == [("app/x.py", "read", (10, 20))]


def test_script_writes_and_clean_paths():
    assert script_writes("open('a.txt', 'w')\nopen(\"b.py\", 'a+')\nopen('c.py')\nPath('d.md').write_text(x)") == [
        "a.txt", "b.py", "d.md"]
    assert clean_path("./a/b.py") == "a/b.py"
    assert [clean_path(t) for t in ("-x", "/dev/null", "*.py", "$HOME", "https://x.org", "2")] == [None] * 6


def test_a_dotted_test_name_is_kept_for_the_trail_to_resolve():
    assert kinds("python -m unittest tests.test_mod.TestA.test_b -v") == [("tests.test_mod.TestA.test_b", "tested",
                                                                            None)]


def test_a_quote_in_a_comment_does_not_hide_the_commands_after_it():
    assert logical_lines("# Let's fix the file\nsed -i 's/a/b/' src/app.py") == [
        "# Let's fix the file", "sed -i 's/a/b/' src/app.py"]
    assert [(t.path, t.kind) for t in command_touches("cd /testbed # don't forget\nsed -i 's/a/b/' src/app.py")] == [
        ("src/app.py", "edited")]
    assert logical_lines("echo 'a # b'\nls") == ["echo 'a # b'", "ls"]  # inside quotes `#` is text


def test_a_script_writing_through_the_name_it_gave_the_path_edits_that_file():
    body = ("path = '/testbed/src/app.py'\nwith open(path) as f:\n    s = f.read()\n"
            "with open(path, 'w') as f:\n    f.write(s)")
    assert script_writes(body) == ["/testbed/src/app.py"]
    assert script_writes("log = 'out.txt'\nopen(log, 'r')\nopen(other, 'w')") == []  # read only; a name never given
    twice = "p = 'a.txt'\nopen(p, 'w').write('x')\np = 'b.txt'\nopen(p, 'w').write('y')"
    assert script_writes(twice) == ["a.txt", "b.txt"]  # each open with the value the name has there
    assert script_writes("def save():\n    open(out, 'w')\nout = 'b.txt'") == []  # given after the open


def test_a_windows_drive_path_is_kept_with_forward_slashes_and_counts_as_absolute():
    assert clean_path(r"C:\Users\jim\proj\app.py") == "C:/Users/jim/proj/app.py"
    touches = command_touches(r"cd C:\python\test && python3 C:\python\cctrace\export.py --max-age 9 2>&1 | head")
    assert [(t.path, t.kind) for t in touches] == [("C:/python/cctrace/export.py", "ran")]
    assert cd_dirs(r"cd C:\python\app && ls") == ["C:/python/app"]
    assert command_touches(r'grep -E "x:\d+" a.py')[0].path == "a.py"  # a regex's `x:\d` is no drive path
