"""Every CLI failure is one `error:` line on stderr and exit code 2 — never a traceback.

These run the real `workmem` console script in a subprocess, because a traceback at interpreter exit
(a closed pipe, say) is only visible there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

WORKMEM = shutil.which("workmem", path=str(Path(sys.executable).parent)) or "workmem"
MESSAGES = [{"role": "user", "content": "The deploy of 2024-05-14 broke the CSV import."},
            {"role": "assistant", "content": "Reading app/importers/csv_loader.py first."}]

pytestmark = pytest.mark.slow


def workmem(*argv: str, stdin: str = "", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the console script; WORKMEM_MODEL and the OpenAI variables come only from `env`."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("WORKMEM_", "OPENAI_"))}
    return subprocess.run([WORKMEM, *argv], input=stdin, capture_output=True, text=True, timeout=120,
                          env={**base, **(env or {})})


def assert_one_error_line(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr + done.stdout
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for needle in needles:
        assert needle in lines[0]


@pytest.fixture
def filled(tmp_path) -> Path:
    """A root holding session `s` with two messages."""
    root = tmp_path / "root"
    done = workmem("--root", str(root), "add", "s", stdin=json.dumps(MESSAGES))
    assert done.returncode == 0, done.stderr
    return root


def test_a_root_that_is_a_file(tmp_path):
    afile = tmp_path / "file"
    afile.write_text("x")
    assert_one_error_line(workmem("--root", str(afile), "add", "s", stdin=json.dumps(MESSAGES)),
                          "not a directory")


def test_a_root_that_cannot_be_created(tmp_path):
    afile = tmp_path / "file"
    afile.write_text("x")
    assert_one_error_line(workmem("--root", str(afile / "below"), "add", "s", stdin=json.dumps(MESSAGES)),
                          "Not a directory")


def test_add_with_no_messages_says_so(tmp_path):
    assert_one_error_line(workmem("--root", str(tmp_path / "r"), "add", "s", stdin=""), "no messages")
    assert_one_error_line(workmem("--root", str(tmp_path / "r"), "add", "s", stdin="[]"), "no messages")


def test_deeply_nested_json_input(tmp_path):
    assert_one_error_line(workmem("--root", str(tmp_path / "r"), "add", "s", stdin="[" * 200_000),
                          "nested too deeply")


def test_an_add_that_stored_its_batch_succeeds_though_the_index_is_damaged(filled):
    """The append is durable before the index is read: a failure then would make the caller's retry store the batch
    twice."""
    (filled / "index.sqlite").write_text("garbage")
    more = [{"role": "user", "content": "One more question about the CSV import."}]
    done = workmem("--root", str(filled), "add", "s", stdin=json.dumps(more))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "added 1 message(s)" in done.stdout and "stored" in done.stderr
    lines = (filled / "sessions" / "s" / "messages.jsonl").read_text().splitlines()
    assert [json.loads(line)["seq"] for line in lines] == [1, 2, 3]


def test_expand_past_the_last_seq(filled):
    assert_one_error_line(workmem("--root", str(filled), "expand", "s", "--start-seq", "3", "--end-seq", "9"),
                          "start_seq", "last message (seq 2)")


def test_tasks_of_an_unknown_session(filled):
    assert_one_error_line(workmem("--root", str(filled), "tasks", "--session", "nobody"), "session not found")


def test_a_closed_pipe_under_json(filled):
    """`workmem search … --json | head -c 1`: the reader goes away; no traceback at exit."""
    for _ in range(3):
        workmem("--root", str(filled), "add", "s", stdin=json.dumps(MESSAGES * 200))
    assert workmem("--root", str(filled), "commit", "s", "--keep", "0").returncode == 0
    proc = subprocess.Popen([WORKMEM, "--root", str(filled), "expand", "s", "archive_001", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.read(1)
    proc.stdout.close()  # the pipe closes while the command is still writing
    stderr = proc.stderr.read()
    proc.wait(timeout=60)
    assert proc.returncode == 2 and "Traceback" not in stderr
    assert stderr.strip().splitlines() == ["error: output pipe closed"]


@pytest.mark.parametrize("argv", [["sessions"], ["check", "s"], ["context", "s"]])
def test_a_closed_pipe_under_text_output_is_an_error_not_a_finding(filled, argv):
    """`workmem check s | head -0`: exit 1 means "a finding"; a reader gone is an error (2) that says so."""
    for _ in range(2):
        workmem("--root", str(filled), "add", "s", stdin=json.dumps(MESSAGES * 100))
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command writes
    done = subprocess.run([WORKMEM, "--root", str(filled), *argv], stdout=write, stderr=subprocess.PIPE, text=True,
                          timeout=120, env={k: v for k, v in os.environ.items() if not k.startswith("WORKMEM_")})
    os.close(write)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines() == ["error: output pipe closed"]


def test_a_model_without_its_key_fails_the_commit_only(filled):
    env = {"WORKMEM_MODEL": "openai:gpt-4o-mini"}
    assert workmem("--root", str(filled), "add", "s", stdin=json.dumps(MESSAGES), env=env).returncode == 0
    for argv in (["context", "s"], ["search", "s", "deploy"], ["expand", "s", "--start-seq", "1", "--end-seq", "2"],
                 ["tasks"]):
        done = workmem("--root", str(filled), *argv, env=env)
        assert done.returncode == 0, (argv, done.stderr)
    assert_one_error_line(workmem("--root", str(filled), "commit", "s", "--keep", "0", env=env), "OPENAI_API_KEY")


def test_an_unknown_model_spec_is_refused_before_anything(tmp_path):
    root = tmp_path / "r"
    assert_one_error_line(workmem("--root", str(root), "add", "s", stdin=json.dumps(MESSAGES),
                                  env={"WORKMEM_MODEL": "my-local-model"}), "WORKMEM_MODEL")
    assert not root.exists(), "nothing written"


def test_help_shows_defaults():
    for argv, default in ((["commit", "--help"], "(default: messages:10)"),
                          (["context", "--help"], "(default: 128000)"),
                          (["demo", "--help"], "(default: tokens:4000)"),
                          (["eval", "--help"], "(default: fraction:0.8)")):
        done = workmem(*argv)
        assert done.returncode == 0 and default in " ".join(done.stdout.split()), (argv, done.stdout)
