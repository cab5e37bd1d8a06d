"""The errors a run directory says to a person: `RunError`, `RowError`, and one sentence for any error of the file
system (`fs_error`)."""

from __future__ import annotations

import errno
from pathlib import Path


class RunError(ValueError):
    """A run directory that cannot be used as asked (one sentence for the user)."""


class RowError(RunError):
    """A JSONL line that is not a whole, checked row (edited or corrupted)."""


def fs_error(e: OSError, path: "str | Path | None" = None) -> str:
    """One sentence for an error of the file system: the path it happened on and what to do (the CLI's boundary says
    it instead of a traceback; a read-only run once ended in `OSError: [Errno 30]` on RUN/.lock)."""
    where = str(path if path is not None else (e.filename if e.filename is not None else "a file"))
    code = e.errno
    cache = _in_model_cache(where)
    if cache is not None and code in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT):
        # issue 42: a read-only HOME was told to "copy the run to a writable folder" when the model cache was the problem
        what = {errno.EROFS: "is on a read-only file system", errno.ENOSPC: "has no space left",
                errno.EDQUOT: "has no space left"}.get(code, "is not writable")
        return (f"{where} {what}: it is in the model cache ({cache}), where models are converted and organisms trained "
                "once; set AMBENCH_CACHE to a writable folder with room for them (about 2 GB) and run the command again")
    if code == errno.EROFS:
        return f"{where} is on a read-only file system: copy the run to a writable folder and give that folder instead"
    if code in (errno.ENOSPC, errno.EDQUOT):
        return (f"no space left on the device holding {where}: free some space (or give a folder on another disk) and run the "
                "command again; the files already written are kept")
    if code in (errno.EACCES, errno.EPERM):
        return f"permission denied on {where}: give a folder you may write to, or change its permissions"
    if code == errno.ENOTDIR:
        return f"{where}: a file stands where a folder is expected; move that file away or give another folder"
    if code == errno.EEXIST:
        return f"{where} already exists as a file where a folder is expected; move it away or give another folder"
    if code == errno.EISDIR:
        return f"{where} is a folder where a file is expected; give a file"
    if code == errno.ENOENT:
        return f"{where}: no such file or folder"
    return f"{where}: {e.strerror or e}; check the path and the disk, then run the command again"


def _in_model_cache(where: str) -> "Path | None":
    """The model cache's root ($AMBENCH_CACHE, default ~/.cache/ambench) when `where` lies in it, is it, or is a folder
    above it that making it needed (a read-only HOME fails at ~/.cache), else None."""
    try:
        from interp.model_names import cache_dir

        root = Path(cache_dir()).parent.absolute()
        p = Path(where).absolute()
    except Exception:  # noqa: BLE001 - no cache to name: the general advice applies
        return None
    inside = p == root or root in p.parents
    above = p in root.parents and p != Path(p.anchor) and p != Path.home().absolute()
    return root if inside or above else None
