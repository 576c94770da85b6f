"""tests/benchmarks/run.py on stub suites: discovery, skipping, one table, bench.json, exit codes."""

from __future__ import annotations

import importlib.util
import json
import sys
from io import StringIO
from pathlib import Path
from textwrap import dedent
from types import ModuleType

import pytest
from paths import BENCHMARKS
from rich.console import Console

RUN_PY = BENCHMARKS / "run.py"

STUBS = {
    "bench_alpha.py": """
        from common import BenchRow

        CALLS = []

        def run(quick=False):
            CALLS.append(quick)
            return [BenchRow.of("alpha fast path", 2.0, 4.0, 1.5, "ms"),
                    BenchRow.of("alpha slow path", 9.0, 3.0, 1.5, "ms"),
                    BenchRow.of("alpha, no target", 1.0, 0.0, None, "µs")]
    """,
    "bench_broken.py": "import a_module_that_does_not_exist\n",
    "bench_crash.py": "def run(quick=False):\n    raise RuntimeError('disk on fire')\n",
    "bench_norun.py": "VALUE = 1\n",
    "helper.py": "raise AssertionError('not a bench_ module: never imported')\n",
}


@pytest.fixture
def runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_runner_under_test", RUN_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def bench_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "benches"
    folder.mkdir()
    for name, text in STUBS.items():
        (folder / name).write_text(dedent(text), encoding="utf-8")
    (folder / "common.py").write_text((RUN_PY.parent / "common.py").read_text(encoding="utf-8"), encoding="utf-8")
    return folder


def _console() -> Console:
    return Console(file=StringIO(), width=200, color_system=None)


def test_discover_skips_modules_that_fail_to_import(runner: ModuleType, bench_dir: Path) -> None:
    suites, skipped = runner.discover(bench_dir)
    assert [name for name, _ in suites] == ["alpha", "crash"]
    assert {s["suite"]: s["reason"].split(":")[0] for s in skipped} == {"broken": "import failed",
                                                                      "norun": "no run(quick) function"}
    assert "a_module_that_does_not_exist" in skipped[0]["reason"]


def test_quick_run_prints_one_table_and_writes_json(runner: ModuleType, bench_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    console = _console()
    code = runner.main(["--quick", "--out", str(out)], bench_dir=bench_dir, console=console)
    assert code == 1  # bench_crash raised
    alpha = sys.modules["workmem_bench_bench_alpha"]
    assert alpha.CALLS == [True]  # --quick reached the suite
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["quick"] is True and report["suites"] == ["alpha", "crash"]
    rows = {r["metric"]: r for r in report["rows"]}
    assert rows["alpha fast path"]["ratio"] == pytest.approx(0.5) and rows["alpha fast path"]["pass"] is True
    assert rows["alpha slow path"]["ratio"] == pytest.approx(3.0) and rows["alpha slow path"]["pass"] is False
    assert rows["alpha, no target"]["ratio"] is None and rows["alpha, no target"]["pass"] is None  # inf → null
    assert [f["suite"] for f in report["failed"]] == ["crash"] and "disk on fire" in report["failed"][0]["reason"]
    assert [s["suite"] for s in report["skipped"]] == ["broken", "norun"]
    text = console.file.getvalue()
    for column in ("metric", "workmem", "baseline", "ratio", "target", "pass/fail"):
        assert column in text
    assert "alpha slow path" in text and "fail" in text and "3.00×" in text and "skipped broken" in text


def test_exit_codes_only_and_strict(runner: ModuleType, bench_dir: Path, tmp_path: Path) -> None:
    out = str(tmp_path / "b.json")
    assert runner.main(["--only", "alpha", "--out", out], bench_dir=bench_dir, console=_console()) == 0
    assert json.loads(Path(out).read_text(encoding="utf-8"))["suites"] == ["alpha"]
    assert runner.main(["--only", "alpha", "--strict", "--out", out], bench_dir=bench_dir, console=_console()) == 1
    alpha = sys.modules["workmem_bench_bench_alpha"]
    assert alpha.CALLS == [False]  # not quick; a fresh import per run
