"""Power-loss simulation: replay the shim's log of file-system steps and build what a disk holds after a cut.

`power_shim.c` (compiled here with the machine's cc) logs every open, write, truncate, fsync, rename,
unlink and mkdir under one folder, plus the workload's MARK lines (what it confirmed so far). A cut
just before step `j` keeps only what was durable by then, under one of two models:

- `posix`: the strict POSIX model. A file's data is durable only as of its last fsync/fdatasync; a
  directory entry (create, rename, unlink, mkdir) only once that directory was fsynced; `sync()` makes
  everything durable. Nothing else survives: a file whose entry was synced but never its data is empty.
- `ext4`: like ext4 with data=ordered and delayed allocation. Every fsync commits the journal, so every
  directory change so far becomes durable; data only when its own file was fsynced, or when it was
  renamed over an existing name (ext4's auto_da_alloc flushes it at the next commit).

The durable state only changes at sync steps, so the cuts worth testing are "just before each sync
step" (and the end): each holds the most confirmations its durable state has to honour.
"""

from __future__ import annotations

import copy
import os
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

SHIM_SOURCE = Path(__file__).resolve().parent / "power_shim.c"
MODELS = ("posix", "ext4")
(OP_OPEN, OP_WRITE, OP_TRUNC, OP_FSYNC, OP_RENAME, OP_UNLINK, OP_MKDIR, OP_RMDIR, OP_SYNC, OP_MARK,
 OP_UNSUPPORTED, OP_ROOT) = range(1, 13)
SYNC_OPS = (OP_FSYNC, OP_SYNC)
HEADER = struct.Struct("<IIQqQII")
O_CREAT, O_TRUNC = os.O_CREAT, os.O_TRUNC
SKIPPED_SUFFIXES = ("-shm",)  # SQLite's WAL index: written through mmap, rebuilt by the first opener


def build_shim(out_dir: Path) -> Path | None:
    """Compile the shim with the machine's `cc`; None when there is no compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    out = out_dir / "power_shim.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(out), str(SHIM_SOURCE), "-ldl", "-lpthread"],
                   check=True, capture_output=True)
    return out


def run_logged(shim: Path, fs_root: Path, log: Path, mark: Path, argv: list[str], timeout: float = 300) -> None:
    """Run `argv` (a Python script and its arguments) with the shim logging `fs_root`."""
    env = {**os.environ, "LD_PRELOAD": str(shim), "WM_SHIM_ROOT": str(fs_root), "WM_SHIM_LOG": str(log),
           "WM_SHIM_MARK": str(mark)}
    proc = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"workload failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")


@dataclass
class Op:
    """One logged step."""

    kind: int
    flags: int
    ino: int
    off: int
    p1: str
    p2: str
    data: bytes


def parse_log(path: Path) -> list[Op]:
    """The shim's records, in order."""
    raw = path.read_bytes()
    ops, pos = [], 0
    while pos < len(raw):
        kind, flags, ino, off, length, l1, l2 = HEADER.unpack_from(raw, pos)
        pos += HEADER.size
        p1 = raw[pos:pos + l1].decode()
        pos += l1
        p2 = raw[pos:pos + l2].decode()
        pos += l2
        ops.append(Op(kind, flags, ino, off, p1, p2, raw[pos:pos + length]))
        pos += length
    return ops


@dataclass
class State:
    """A namespace of synthetic inodes: folders map names to inodes, files hold bytes."""

    dirs: dict[int, dict[str, int]] = field(default_factory=dict)
    files: dict[int, bytes | bytearray] = field(default_factory=dict)


class Replay:
    """Walks the log once, keeping the volatile state (what the running program saw) and the durable one."""

    def __init__(self, ops: list[Op], model: str) -> None:
        if model not in MODELS:
            raise ValueError(model)
        unsupported = [op for op in ops if op.kind == OP_UNSUPPORTED]
        if unsupported:
            raise AssertionError(f"the workload used calls the model does not replay: {unsupported[:3]}")
        root = next(op for op in ops if op.kind == OP_ROOT)
        self.ops, self.model, self.root_path = ops, model, root.p1
        self.vol, self.dur = State({0: {}}), State({0: {}})
        self.ids: dict[int, int] = {root.ino: 0}  # real inode → synthetic id (inode numbers get reused)
        self.next_id = 1
        self.flush_at_commit: set[int] = set()
        self.marks: list[str] = []
        self.pos = 0

    def cut_points(self) -> list[int]:
        """Indices `j` worth cutting just before: each sync step, and the end of the log."""
        return [i for i, op in enumerate(self.ops) if op.kind in SYNC_OPS] + [len(self.ops)]

    def advance(self, j: int) -> None:
        """Apply steps up to (not including) `j`."""
        while self.pos < j:
            self._apply(self.ops[self.pos])
            self.pos += 1

    def image(self) -> tuple[dict[str, bytes | None], list[str]]:
        """What the disk holds now: relative path → bytes (None for a folder), and the marks seen so far."""
        tree: dict[str, bytes | None] = {}

        def walk(dir_id: int, prefix: str) -> None:
            for name, ident in sorted(self.dur.dirs.get(dir_id, {}).items()):
                rel = f"{prefix}{name}"
                if ident in self.dur.dirs or ident in self.vol.dirs:
                    tree[rel] = None
                    walk(ident, rel + "/")
                elif not name.endswith(SKIPPED_SUFFIXES):
                    tree[rel] = bytes(self.dur.files.get(ident, b""))

        walk(0, "")
        return tree, list(self.marks)

    # -- replay -------------------------------------------------------------------------------------------

    def _lookup(self, path: str) -> tuple[int, str]:
        rel = os.path.relpath(path, self.root_path)
        parts = [] if rel == "." else rel.split("/")
        parent = 0
        for part in parts[:-1]:
            parent = self.vol.dirs[parent][part]
        return parent, parts[-1] if parts else ""

    def _new_id(self, ino: int) -> int:
        ident, self.next_id = self.next_id, self.next_id + 1
        self.ids[ino] = ident
        return ident

    def _apply(self, op: Op) -> None:
        vol = self.vol
        if op.kind == OP_OPEN:
            parent, name = self._lookup(op.p1)
            if name == "":
                return
            entries = vol.dirs[parent]
            if name not in entries:
                ident = self._new_id(op.ino)
                entries[name] = ident
                vol.files[ident] = bytearray()
            self.ids[op.ino] = entries[name]
            if op.flags & O_TRUNC and not op.off:
                vol.files[entries[name]] = bytearray()
        elif op.kind == OP_WRITE:
            buf = vol.files[self.ids[op.ino]]
            end = op.off + len(op.data)
            if len(buf) < end:
                buf.extend(b"\0" * (end - len(buf)))
            buf[op.off:end] = op.data
        elif op.kind == OP_TRUNC:
            buf = vol.files[self.ids[op.ino]]
            del buf[op.off:]
            if len(buf) < op.off:
                buf.extend(b"\0" * (op.off - len(buf)))
        elif op.kind == OP_MKDIR:
            parent, name = self._lookup(op.p1)
            ident = self._new_id(op.ino)
            vol.dirs[parent][name] = ident
            vol.dirs[ident] = {}
        elif op.kind == OP_RENAME:
            sp, sn = self._lookup(op.p1)
            dp, dn = self._lookup(op.p2)
            ident = vol.dirs[sp].pop(sn)
            if dn in vol.dirs[dp] and self.model == "ext4":
                self.flush_at_commit.add(ident)
            vol.dirs[dp][dn] = ident
        elif op.kind in (OP_UNLINK, OP_RMDIR):
            parent, name = self._lookup(op.p1)
            vol.dirs[parent].pop(name)
        elif op.kind == OP_FSYNC:
            ident = self.ids[op.ino]
            if op.flags:  # a folder
                if self.model == "posix":
                    self.dur.dirs[ident] = dict(vol.dirs[ident])
                else:
                    self._commit_journal()
            else:
                self.dur.files[ident] = bytes(vol.files[ident])
                if self.model == "ext4":
                    self._commit_journal()
        elif op.kind == OP_SYNC:
            self.dur = State({k: dict(v) for k, v in vol.dirs.items()},
                             {k: bytes(v) for k, v in vol.files.items()})
        elif op.kind == OP_MARK:
            self.marks.extend(line for line in op.data.decode().splitlines() if line)

    def _commit_journal(self) -> None:
        self.dur.dirs = copy.deepcopy(self.vol.dirs)
        for ident in self.flush_at_commit:
            if ident in self.vol.files:
                self.dur.files[ident] = bytes(self.vol.files[ident])
        self.flush_at_commit.clear()


def materialize(tree: dict[str, bytes | None], dest: Path) -> None:
    """Write an image's tree under `dest` (owner-only modes, as workmem creates them)."""
    dest.mkdir(parents=True, mode=0o700)
    for rel, data in sorted(tree.items()):
        path = dest / rel
        if data is None:
            path.mkdir(mode=0o700)
        else:
            path.write_bytes(data)
            path.chmod(0o600)
