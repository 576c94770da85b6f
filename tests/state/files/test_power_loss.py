"""Power loss (issue 26): every file-system step of a real workload is logged by an LD_PRELOAD shim, and disks
are rebuilt as a power cut would leave them — unsynced writes and unsynced directory entries dropped —
under a strict POSIX model and an ext4-like one, on both `durable` settings. Each image must open, resume,
keep every confirmed message exactly once and in order, keep every confirmed archive, find every archived
message by search (and no live one), keep a deleted session deleted, and commit one more turn.

A few images per model here; `tests/benchmarks/bench_power_loss.py` replays every cut point.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import power_child
import power_model
import pytest
from paths import TESTS

pytestmark = pytest.mark.slow
ROUNDS = 12  # three commits per session
IMAGES_PER_MODEL = 6
NEVER = ("lost", "duplicated", "disorder", "archives_lost", "search_missed", "search_live", "deleted_back",
         "commit_failed")


@pytest.fixture(scope="module")
def shim(tmp_path_factory):
    if not sys.platform.startswith("linux"):
        pytest.skip("the power-loss shim intercepts glibc calls: Linux only")
    built = power_model.build_shim(tmp_path_factory.mktemp("shim"))
    if built is None:
        pytest.skip("no C compiler (cc) on this machine: the power-loss shim cannot be built")
    return built


def logged_run(shim: Path, base: Path, durable: bool, rounds: int = ROUNDS) -> list[power_model.Op]:
    fs_root = base / "fs"
    fs_root.mkdir()
    power_model.run_logged(shim, fs_root, base / "log", base / "marks",
                           [str(TESTS / "power_child.py"), str(fs_root / "data"), "1" if durable else "0",
                            str(base / "marks"), str(rounds)])
    return power_model.parse_log(base / "log")


def spread(points: list[int], k: int) -> list[int]:
    """k cut points spread over the run, the last (everything written, nothing synced after) included."""
    if len(points) <= k:
        return points
    return sorted({points[round(i * (len(points) - 1) / (k - 1))] for i in range(k)})


@pytest.mark.parametrize("durable", [True, False], ids=["durable", "not-durable"])
@pytest.mark.parametrize("model", power_model.MODELS)
def test_power_cut_loses_nothing_confirmed(shim, tmp_path, durable, model):
    ops = logged_run(shim, tmp_path, durable)
    replay = power_model.Replay(ops, model)
    cuts = replay.cut_points()
    assert len(cuts) > 50, "the workload must give the power cut many places to land"
    totals = dict.fromkeys(NEVER, 0) | {"confirmed": 0, "archives": 0}
    for j in spread(cuts, IMAGES_PER_MODEL):
        replay.advance(j)
        tree, marks = replay.image()
        image = tmp_path / f"image-{j}"
        power_model.materialize(tree, image)
        counts = power_child.verify(image / "data", marks, durable)
        assert {k: counts[k] for k in NEVER} == dict.fromkeys(NEVER, 0), (j, counts)
        for key, value in counts.items():
            totals[key] += value
    assert totals["confirmed"] > 50 and totals["archives"] > 3  # the images did hold confirmed data


def test_the_model_drops_what_was_never_synced(shim, tmp_path):
    """The replay itself can fail a test: unsynced data and unsynced directory entries are gone after a cut."""
    fs_root = tmp_path / "fs"
    fs_root.mkdir()
    script = tmp_path / "steps.py"
    script.write_text(
        "import os, sys\n"
        "root, mark = sys.argv[1], sys.argv[2]\n"
        "def put(name, data, sync_file, sync_dir):\n"
        "    fd = os.open(os.path.join(root, name), os.O_WRONLY | os.O_CREAT, 0o600)\n"
        "    os.write(fd, data)\n"
        "    if sync_file: os.fsync(fd)\n"
        "    os.close(fd)\n"
        "    if sync_dir:\n"
        "        d = os.open(root, os.O_RDONLY); os.fsync(d); os.close(d)\n"
        "put('a', b'synced', True, True)\n"
        "put('b', b'entry only', False, True)\n"
        "put('c', b'data only', True, False)\n"
        "os.replace(os.path.join(root, 'a'), os.path.join(root, 'renamed'))\n"
        "open(mark, 'a').write('end\\n')\n")
    power_model.run_logged(shim, fs_root, tmp_path / "log", tmp_path / "marks",
                           [str(script), str(fs_root), str(tmp_path / "marks")])
    ops = power_model.parse_log(tmp_path / "log")
    images = {}
    for model in power_model.MODELS:
        replay = power_model.Replay(ops, model)
        replay.advance(len(ops))
        images[model] = replay.image()
    # POSIX: b's entry survives (its folder was synced after it) but not its data; c's data was synced but
    # its entry never was (the folder's last fsync came before it); the rename was never synced either.
    assert images["posix"] == ({"a": b"synced", "b": b""}, ["end"])
    # ext4: c's fsync committed the journal, so every entry so far is durable; b's data never was.
    assert images["ext4"] == ({"a": b"synced", "b": b"", "c": b"data only"}, ["end"])


def test_an_unreplayable_call_fails_loudly(shim, tmp_path):
    fs_root = tmp_path / "fs"
    fs_root.mkdir()
    script = tmp_path / "steps.py"
    script.write_text("import os, sys\nopen(os.path.join(sys.argv[1], 'x'), 'w').close()\n"
                      "os.link(os.path.join(sys.argv[1], 'x'), os.path.join(sys.argv[1], 'y'))\n")
    power_model.run_logged(shim, fs_root, tmp_path / "log", tmp_path / "marks", [str(script), str(fs_root)])
    with pytest.raises(AssertionError, match="does not replay"):
        power_model.Replay(power_model.parse_log(tmp_path / "log"), "posix")


def test_the_shim_logs_nothing_outside_its_root(shim, tmp_path):
    fs_root, elsewhere = tmp_path / "fs", tmp_path / "elsewhere"
    fs_root.mkdir()
    elsewhere.mkdir()
    script = tmp_path / "steps.py"
    script.write_text("import os, sys\nwith open(os.path.join(sys.argv[1], 'x'), 'wb') as f:\n"
                      "    f.write(b'1'); os.fsync(f.fileno())\n")
    power_model.run_logged(shim, fs_root, tmp_path / "log", tmp_path / "marks", [str(script), str(elsewhere)])
    assert [op.kind for op in power_model.parse_log(tmp_path / "log")] == [power_model.OP_ROOT]
    assert os.path.exists(elsewhere / "x")
