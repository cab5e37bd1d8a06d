"""The run directory: one object owns its file names, its lock, its rows and its settings record.

A run directory holds everything one study writes (`docs/study.md` lists the files). `RunDir` is the
only place that knows a file's name, reads or writes a JSONL row, writes a file atomically, records
settings in `config.json`, builds the attempt key and derives seeds; stages ask it.

- **One writer.** `RunDir.writer(path, command)` takes an exclusive lock (`flock` on `RUN/.lock`,
  released by the kernel when the process ends, so a killed run leaves no stale lock) for the whole
  command; a second writer is refused with one sentence naming the holder. Readers take no lock and
  never write: a torn last line (a writer killed mid-write) is skipped when reading and repaired only
  by the lock holder.
- **Checked rows.** Every JSONL row the run writes carries `_crc`, the CRC-32 of its other fields'
  canonical JSON; a row that fails it, or has none (a row whose checksum was deleted to edit it), is
  reported with the file and line ("edited or corrupted") and the command that repairs it
  (`ambench repair RUN`, `experiments.repair`), never used silently.
- **Content-keyed resume.** Rows of resumable stages carry `input`, a hash of what produced them
  (the prompt text, the settings, the model's weights digest, the attempt's text...). A stage resumes
  a unit only when both the key and the input hash match; a stale row is dropped and recomputed.
- **Atomic files.** Whole files are written to a temporary name, fsynced and renamed; a write that fails (a full
  disk, a Ctrl-C) removes its temporary file and leaves the old file, and a failed append cuts back to the rows
  that were whole (a full disk once left `.probes.jsonl.tmp` inside a finished study).
- **Only a run is a run, and refusals leave no trace.** A writer on an existing run (`create=False`) refuses a
  folder that is not one (no config.json or generations.jsonl) before taking its lock; a folder `writer` made is
  removed again by `discard_if_unused` when the command refuses; the lock is opened inside a handler, and every
  error of the file system becomes one sentence naming the path and what to do (`fs_error`; issue 31).

An attempt is identified by `AttemptKey` (model, task, protocol, medium, prompt id, sample), in that
order, with one spelling everywhere: resume checks, the `key` column of the render store, the seeds of
derived work (continuations, patching, steering) and the grouping of every table. A key that leaves a
field out is how a second model's work was once silently skipped (its programs coincided with the
first model's), so derived stages key their units on the whole attempt key plus their own fields.

Each piece has a module of its own and is imported from here: the errors (`experiments.run_errors`), the checked
rows and atomic files (`experiments.jsonl`), the keys and seeds (`experiments.keys`) and the settings record
(`experiments.run_settings`).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from experiments.jsonl import atomic_write, encode_row, lenient_rows, parse_rows, read_rows  # noqa: F401 - re-exported
from experiments.keys import (DEFAULT_MEDIUM, AttemptKey, arm_of, content_hash, derive_seed,  # noqa: F401 - re-exported
                              parse_arm, safe_name)
from experiments.run_errors import RowError, RunError, fs_error  # noqa: F401 - re-exported
from experiments.run_settings import SettingsRecord, _diff  # noqa: F401 - re-exported


# --------------------------------------------------------------------------- the directory


class RunDir(SettingsRecord):
    """A run directory: file names, the lock, checked JSONL rows, atomic writes and the settings record."""

    # every file name of a run, in one place
    CONFIG = "config.json"
    GENERATIONS = "generations.jsonl"
    PROMPTS = "prompts.jsonl"
    RENDERS = "renders"
    TRANSLATION_REFS = "translation_refs.jsonl"
    TRANSLATION_SCORES = "translation_scores.jsonl"
    LAYOUT_TABLE = "layout_table.json"
    MEDIA_TABLE = "media_table.json"
    TIER_GAPS = "tier_gaps.json"  #: the T2/T3 gap per medium and its contrast across media (issue 16)
    JUDGE_SCORES = "judge_scores.jsonl"
    JUDGE_CACHE = "judge_cache.jsonl"
    PROBES = "probes.jsonl"
    PROBE_PLOTS = "probes"
    SELECTIVITY = "selectivity.jsonl"  #: cross-model decoding table and the own-minus-others gap (issue 16)
    ATTENTION = "attention.jsonl"  #: attention focus on the prompt's spatial words, per attempt (issue 16)
    ATTENTION_TABLE = "attention_table.json"
    ATTENTION_PLOT = "attention.png"
    INTERVENTIONS = "interventions.jsonl"
    CUTS = "intervention_cuts.jsonl"
    PATCHING = "patching.jsonl"
    INTERVENTIONS_TABLE = "interventions_table.json"
    STEERING = "steering.jsonl"
    CAUSAL = "causal.jsonl"  #: readable or used: the causal test at the layout probe's best site (issue 41)
    CONSISTENCY = "consistency.jsonl"
    TRAJECTORY = "trajectory.jsonl"
    TRAJECTORY_PLOTS = "trajectory"
    CONSISTENCY_PLOTS = "consistency"
    SUMMARY = "summary.json"
    REPORT = "report/index.html"
    SVG_NATIVE = "svg_native"
    ACTIVATIONS = "activations"
    SHARDS = "shards"
    LOCK = ".lock"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock_fd: int | None = None
        #: the lock file's content and times before this writer took it (None: it was new or empty): `restore_lock`
        self._lock_before: tuple[bytes, int, int] | None = None
        self.created = False  #: `writer` made the folder (a refusal removes it again: `discard_if_unused`)

    def __str__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r}{', locked' if self.writable else ''})"

    # ------------------------------------------------------------------ names

    def file(self, name: str) -> Path:
        return self.path / name

    def activations(self, model: str) -> Path:
        """The activation store (a folder of parts) of one model."""
        return self.path / self.ACTIVATIONS / safe_name(model)

    def renders(self, medium: str = DEFAULT_MEDIUM) -> Path:
        """The render store (a folder of parts) of one render medium: `renders/` for the paper's canvas,
        `renders-<medium>/` for another canvas medium (its own resolution; issue 16)."""
        return self.path / (self.RENDERS if medium == DEFAULT_MEDIUM else f"{self.RENDERS}-{safe_name(medium)}")

    def render_stores(self) -> list[Path]:
        """Every render store folder present (see `renders`), the paper medium's first."""
        first = [self.renders()] if self.renders().is_dir() else []
        return first + sorted(p for p in self.path.glob(f"{self.RENDERS}-*") if p.is_dir())

    def activation_stores(self) -> list[Path]:
        """Every activation store folder present (one that lost its meta.json too: reading it says what to do)."""
        folder = self.path / self.ACTIVATIONS
        return sorted(p for p in folder.iterdir() if (p / "meta.json").is_file() or any(p.glob("part-*.h5"))) if folder.is_dir() else []

    @property
    def writable(self) -> bool:
        return self._lock_fd is not None

    # ------------------------------------------------------------------ the lock

    @classmethod
    def writer(cls, path: str | Path, command: str | None = None, create: bool = True, needs: str | None = None) -> "RunDir":
        """Open `path` for writing: create it (when `create`; a command that needs an existing run never
        creates one, and says what it needs, `needs`) and hold its exclusive lock until `close()` (or process exit)."""
        import fcntl

        run = cls(path)
        if run.path.exists() and not run.path.is_dir():
            raise RunError(f"{run.path} is a file, not a run directory: give a folder with --out")
        if not create:
            need_run(run.path, needs or cls.GENERATIONS)
        made = not run.path.exists()
        try:
            run.path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RunError(f"cannot create the run directory {run.path}: {fs_error(e, e.filename or run.path)}") from None
        try:  # inside a handler: a read-only or full file system is one sentence, not a traceback (issue 31)
            fd = os.open(run.path / cls.LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            if made:
                with contextlib.suppress(OSError):
                    run.path.rmdir()
            raise RunError(f"cannot take the run's lock: {fs_error(e, run.path / cls.LOCK)}") from None
        run.created = made
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 4096).decode("utf-8", "replace").strip()
            os.close(fd)
            try:
                h = json.loads(holder)
                who = f"process {h.get('pid')} on {h.get('host')} ({h.get('command')})"
            except (json.JSONDecodeError, AttributeError):
                who = "another process"
            raise RunError(f"{run.path} is in use by {who}; wait for it to finish or stop it, "
                           "or use another --out") from None
        try:  # what the lock said before, so that a refusal puts it back as it was (issue 42)
            st = os.fstat(fd)
            run._lock_before = (os.read(fd, 1 << 16), st.st_atime_ns, st.st_mtime_ns) if not made and st.st_size else None
            os.lseek(fd, 0, os.SEEK_SET)
        except OSError:
            run._lock_before = None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                     "command": command or " ".join(sys.argv[:3])}).encode())
        except OSError as e:
            os.close(fd)
            raise RunError(f"cannot take the run's lock: {fs_error(e, run.path / cls.LOCK)}") from None
        run._lock_fd = fd
        return run

    def discard_if_unused(self) -> bool:
        """Remove the folder this writer created when it still holds nothing but the lock (a command that refused
        after taking it, e.g. a model that failed to load): a refusal leaves no new folder behind. True when removed."""
        if not self.created or not self.path.is_dir() or [p.name for p in self.path.iterdir()] not in ([], [self.LOCK]):
            return False
        with contextlib.suppress(OSError):
            (self.path / self.LOCK).unlink()
            self.path.rmdir()
        return not self.path.exists()

    def restore_lock(self) -> None:
        """Put the lock file back as it was before this writer took it (content and times): a command that refuses
        after taking the lock leaves it as it found it (issue 42: a refusal under the lock rewrote .lock with its
        pid and a new mtime). A lock file this writer created stays (the folder's own cleanup removes it)."""
        before = self._lock_before
        if self._lock_fd is None or before is None:
            return
        content, atime, mtime = before
        with contextlib.suppress(OSError):
            os.ftruncate(self._lock_fd, 0)
            os.lseek(self._lock_fd, 0, os.SEEK_SET)
            os.write(self._lock_fd, content)
            os.fsync(self._lock_fd)
            os.utime(self.path / self.LOCK, ns=(atime, mtime))

    def close(self) -> None:
        if self._lock_fd is not None:
            import fcntl

            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> "RunDir":
        return self

    def __exit__(self, *exc: object) -> None:
        if exc and exc[0] is not None and not (isinstance(exc[1], SystemExit) and not exc[1].code):
            self.restore_lock()
        self.close()

    def _need_lock(self) -> None:
        if self._lock_fd is None:
            raise RunError(f"{self.path} was opened read-only; writing needs RunDir.writer (the run's lock)")

    # ------------------------------------------------------------------ rows

    def rows(self, name: str) -> list[dict[str, Any]]:
        """The rows of a run file (read-only). A bad row is one sentence naming the file, the line and the
        command that repairs it."""
        try:
            return read_rows(self.file(name))
        except RowError as e:
            raise RowError(f"{e}: `ambench repair {self.path}` drops the bad rows and what depends on them, and the "
                           "next run recomputes them") from None

    def append(self, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Append rows (one write, flushed and fsynced); a torn tail left by a killed writer is cut first."""
        self._need_lock()
        path = self.file(name)
        self.repair(name)
        if not rows:
            return
        blob = "".join(encode_row(r) for r in rows).encode("utf-8")
        size = path.stat().st_size if path.exists() else None
        try:
            with open(path, "ab") as f:
                f.write(blob)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            # a full disk once left part of the rows: cut back to the rows that were whole before this append
            with contextlib.suppress(OSError):
                if size is None:
                    path.unlink()
                else:
                    os.truncate(path, size)
            raise

    def repair(self, name: str) -> int:
        """Cut a torn last line, or end a whole last row with its newline (lock holder only); returns the
        number of bytes cut."""
        self._need_lock()
        path = self.file(name)
        if not path.exists():
            return 0
        data = path.read_bytes()
        _, good = parse_rows(path, data)
        if good < len(data):
            with open(path, "r+b") as f:
                f.truncate(good)
            return len(data) - good
        if data and not data.endswith(b"\n"):
            with open(path, "ab") as f:
                f.write(b"\n")
        return 0

    def write_rows(self, name: str, rows: Iterable[Mapping[str, Any]]) -> None:
        """Replace a run file with these rows, atomically."""
        self._need_lock()
        atomic_write(self.file(name), "".join(encode_row(r) for r in rows))

    def attempt_order(self) -> Callable[[Mapping[str, Any]], tuple[int, int]]:
        """The key of a row derived from an attempt in the run's canonical order: (its model's place, its attempt's
        place) in generations.jsonl (which a study keeps in its canonical order); rows of no attempt come last."""
        models: dict[str, int] = {}
        index: dict[AttemptKey, int] = {}
        for i, r in enumerate(self.rows(self.GENERATIONS)):
            models.setdefault(str(r["model"]), len(models))
            index[AttemptKey.of(r)] = i
        return lambda r: (models.get(str(r["model"]), len(models)), index.get(AttemptKey.of(r), len(index)))

    def sort_rows(self, name: str, unit: Callable[[Mapping[str, Any]], tuple]) -> bool:
        """Put the rows of a file derived from attempts in the canonical order (model, attempt, then `unit`), so a
        unit recomputed after the rest (a torn or repaired one, appended last) leaves the same file as an
        uninterrupted run; rewritten only when the order changes. True when it did."""
        self._need_lock()
        rows = self.rows(name)
        key = self.attempt_order()
        ordered = sorted(rows, key=lambda r: (*key(r), *unit(r)))
        if ordered == rows:
            return False
        self.write_rows(name, ordered)
        return True

    def write_json(self, name: str, obj: Any) -> None:
        self._need_lock()
        atomic_write(self.file(name), json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False) + "\n")

    def write_text(self, name: str, text: str) -> None:
        self._need_lock()
        atomic_write(self.file(name), text)

    def save_figure(self, fig: Any, name: str) -> Path:
        """Save a matplotlib figure as a PNG of the run, atomically (no timestamps in the file)."""
        import io

        self._need_lock()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", metadata={"Software": None})
        atomic_write(self.file(name), buf.getvalue())
        return self.file(name)

    def json(self, name: str) -> Any:
        """A JSON file of the run, or None when it is absent."""
        path = self.file(name)
        if not path.exists():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise RunError(f"{path} is not valid JSON; the file was edited or corrupted") from None

    # ------------------------------------------------------------------ prompts

    def prompts(self) -> dict[tuple[str, str], Any]:
        """(task, id) -> the prompt item recorded in prompts.jsonl (empty for a run without it)."""
        from interp.prompts import PromptItem

        return {(r["task"], r["id"]): PromptItem(r["id"], r["task"], r["text"], r.get("subject", ""), r.get("group", ""))
                for r in self.rows(self.PROMPTS)}

    def record_prompts(self, items: Sequence[Any]) -> None:
        """Record the prompt items a stage uses (id, task, text, subject), so that later stages (the text
        baseline, interventions, steering) read the very texts the model saw, whatever prompt file they came
        from. A prompt id of a task that comes back with another text is refused."""
        known = {(r["task"], r["id"]): r for r in self.rows(self.PROMPTS)}
        new = []
        for it in items:
            row = {"id": it.id, "task": it.task, "text": it.text, "subject": it.subject}
            if getattr(it, "group", ""):  # only when set: a run recorded before groups existed reads the same rows
                row["group"] = it.group
            old = known.get((it.task, it.id))
            if old is None:
                known[(it.task, it.id)] = row
                new.append(row)
            elif {k: v for k, v in old.items() if k != "group"} != {k: v for k, v in row.items() if k != "group"} or (
                    old.get("group") and row.get("group") and old["group"] != row["group"]):
                raise RunError(f"{self.path} already has {it.task} prompt {it.id!r} with another text, subject or group; "
                               "use another --out for another prompt set")
        self.append(self.PROMPTS, new)

    def prompt_order(self) -> dict[tuple[str, str], int]:
        """(task, id) -> its place in prompts.jsonl: the canonical order in which analyses read per-prompt rows
        (the activation store's parts follow the order they were written in, which a recomputed part changes)."""
        return {(r["task"], r["id"]): i for i, r in enumerate(self.rows(self.PROMPTS))}

    def prompt_item(self, task: str, prompt_id: str) -> Any:
        """The prompt item of (task, id): recorded in the run, else built in; a clear error otherwise."""
        from interp.prompts import items_by_id

        item = self.prompts().get((task, prompt_id))
        if item is None:
            builtin = items_by_id().get(prompt_id)
            if builtin is not None and builtin.task == task:
                return builtin
            raise RunError(f"no text for {task} prompt {prompt_id!r} in {self.path / self.PROMPTS} or built in")
        return item


# --------------------------------------------------------------------------- helpers for stages


class writing:
    """`with writing(run) as rd:` gives a locked RunDir: `run` itself when it already holds the lock (a
    command opened it), else a writer opened for the block (a stage called directly, e.g. from Python)."""

    def __init__(self, run: "str | Path | RunDir", command: str | None = None) -> None:
        self.given = run if isinstance(run, RunDir) else None
        self.path = run.path if isinstance(run, RunDir) else Path(run)
        self.command = command
        self.opened: RunDir | None = None

    def __enter__(self) -> RunDir:
        if self.given is not None and self.given.writable:
            return self.given
        self.opened = RunDir.writer(self.path, self.command)
        return self.opened

    def __exit__(self, *exc: object) -> None:
        if self.opened is not None:
            self.opened.__exit__(*exc)


def need_run(path: Path, needs: str = "generations.jsonl") -> None:
    """A command that reads or adds to a run needs the run: one sentence when `path` is none (never created),
    naming what the command needs from it."""
    path = Path(path)
    if path.is_file():
        raise RunError(f"--run {path} is a file, not a run directory: give the folder `ambench run` or `ambench generate` wrote")
    if not path.is_dir():
        raise RunError(f"--run {path}: no such folder, so it has no {needs}: give the folder `ambench run` or "
                       "`ambench generate` wrote")
    # a folder that is not a run (issues 30, 31): `steer --run <any folder>` once wrote .lock into it and loaded the
    # model for 87 s before failing, `intervene --run EMPTY` left a config.json that made the folder pass for a run
    if not ((path / RunDir.CONFIG).is_file() or (path / RunDir.GENERATIONS).is_file()):
        raise RunError(f"--run {path} is not a run directory (it has no {RunDir.CONFIG} or {RunDir.GENERATIONS}): give the "
                       "folder `ambench run` or `ambench generate` wrote")


def reading(run: "str | Path | RunDir") -> RunDir:
    """A RunDir to read from (no lock; nothing is written)."""
    return run if isinstance(run, RunDir) else RunDir(run)


def answer_text(row: Mapping[str, Any]) -> str:
    """What the program extractor should read: the prompt's open fence (if any) plus the generated text."""
    return row.get("prefix", "") + row["text"]

