"""What the GPU check carries to the device machine: wheels and the embedded models' GGUF files, cut into loads.

    .venv/bin/python perf/gpu_carry.py pack [--models smollm2-135m-instruct,gemma3-270m]   # here (perf/gpu_pack.sh)
    python3 perf/gpu_carry.py stage                                                        # there (perf/gpu_check.sh)

The device (docs/runtime.md, "Checked on a GPU") has PyTorch and transformers but not this project's
other dependencies, reaches no registry, and takes at most 64 MiB per call: the working tree *and* what
`carry` names. `pack` writes the ignored folder `.gpu/`:
- `wheels/`: the packages the device image lacks and the checked code path imports (WHEELS), as
  CPython 3.12 manylinux wheels (`pip download`, the device README's command). Not carried: transformer-lens
  (only the TransformerBridge path imports it, and the check stays on the forward hooks), umap-learn (the
  DINO maps) and ray (`--backend ray`); the dry run blocks those imports to prove it (perf/gpu_block).
- the GGUF files of the embedded models asked for, deflated (zlib, 5.6% smaller) and cut into parts so
  that each call fits: SmolLM2 135M is 98.4 MB (92.9 MB deflated) and Gemma 3 270M 253 MB, against
  64 MiB minus the working tree (14.6 MiB) per call.
- `load-1/`, `load-2/`, ...: one folder per call, each at most ROOM bytes (64 MiB minus the working
  tree as git would send it, minus a margin), every one with a copy of `manifest.json`; the wheels go in
  the last load, with the check.
`stage` (run there, in each call, by perf/gpu_check.sh) copies the parts of every `.gpu/load-*` present
into a folder that outlives the call while the machine stays warm (`$GPU_CHECK_STAGE`, default
/tmp/ambench-gpu), and joins and inflates each GGUF whose parts have all arrived, checking its sha256, into
`$GPU_CHECK_STAGE/gguf/` (what `$AMBENCH_GGUF_DIR` points the runtime at). It needs only the standard
library.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CARRY = ROOT / ".gpu"
LIMIT = 64 << 20  #: bytes one device call may send: the working tree and the carried paths together
MARGIN = 2 << 20  #: kept free for files the tree gains between packing and the call
#: the packages the checked code imports that the device image lacks (its list: the device README's KINDS.md),
#: pinned to the versions this project's setup installs
WHEELS = ("shapely==2.2.0", "resvg-py==0.5.0", "gguf==0.19.0", "krippendorff==0.9.0", "pyseccomp==0.1.2")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")
DEFAULT_MODELS = ("smollm2-135m-instruct",)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tree_bytes(root: Path = ROOT) -> int:
    """Bytes the device tool sends besides `carry`: tracked files, untracked files git does not ignore, shared/."""
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            check=True, capture_output=True).stdout.split(b"\0")
    total = 0
    for name in filter(None, listed):
        p = root / os.fsdecode(name)
        if p.is_file() and not p.is_symlink():
            total += p.stat().st_size
    shared = root / "shared"
    if shared.is_dir():
        total += sum(p.stat().st_size for p in shared.rglob("*") if p.is_file() and not p.is_symlink())
    return total


def deflate(src: Path, dst: Path) -> None:
    z = zlib.compressobj(6)
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        for block in iter(lambda: fin.read(1 << 22), b""):
            fout.write(z.compress(block))
        fout.write(z.flush())


def download_wheels(into: Path) -> list[Path]:
    into.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
           "--implementation", "cp", "-d", str(into), "-q", "--disable-pip-version-check"]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    done = subprocess.run(cmd + list(WHEELS), capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"pip could not download the wheels ({done.stderr.strip().splitlines()[-1:]}); check the network and WHEELS")
    return sorted(into.glob("*.whl"))


SLACK = 64 << 10  #: bytes kept free in each load for its copy of the manifest


def layout(sizes: list[int], wheel_bytes: int, room: int) -> tuple[list[tuple[int, int, int, int, int]], int]:
    """Cut files of these sizes into parts that fill loads of at most `room` bytes in order, the wheels in the
    last load: returns the parts as (file, part index, offset, size, load from 1) and the number of loads."""
    if wheel_bytes > room - SLACK:
        raise ValueError(f"the wheels ({wheel_bytes} bytes) do not fit a load of {room} bytes")
    parts: list[tuple[int, int, int, int, int]] = []
    load, free = 1, room - SLACK
    for fi, size in enumerate(sizes):
        offset, index = 0, 0
        while offset < size:
            if free <= 0:
                load, free = load + 1, room - SLACK
            n = min(size - offset, free)
            parts.append((fi, index, offset, n, load))
            free -= n
            offset += n
            index += 1
    if free < wheel_bytes:
        load += 1
    return parts, load


def pack(models: list[str], room: int | None) -> dict:
    """Write .gpu/ (wheels, GGUF parts, load folders, manifest) and return the manifest."""
    from interp.models import EMBEDDED, gguf_path

    for m in models:
        if m not in EMBEDDED:
            sys.exit(f"unknown embedded model {m!r}: use {', '.join(EMBEDDED)}")
    tree = tree_bytes()
    room = room or LIMIT - tree - MARGIN
    if room < 4 << 20:
        sys.exit(f"the working tree is {tree / 2**20:.1f} MiB, which leaves no room for carried files under 64 MiB a call")
    if CARRY.exists():
        shutil.rmtree(CARRY)
    wheels = download_wheels(CARRY / "wheels")
    wheel_bytes = sum(w.stat().st_size for w in wheels)
    wheel_list = [{"name": w.name, "size": w.stat().st_size} for w in wheels]
    files = []
    for m in models:
        src = gguf_path(EMBEDDED[m])
        z = CARRY / (src.name + ".z")
        deflate(src, z)  # zlib saves 5.6% of SmolLM2's file: enough for its two parts and the wheels to fit two calls
        files.append({"model": m, "name": src.name, "size": src.stat().st_size, "sha256": sha256(src),
                      "zsize": z.stat().st_size, "src": str(z)})
    try:
        parts, n_loads = layout([f["zsize"] for f in files], wheel_bytes, room)
    except ValueError as e:
        sys.exit(str(e))
    for f in files:
        f["parts"] = []
    for fi, index, offset, n, load in parts:
        f = files[fi]
        with open(f["src"], "rb") as fh:
            fh.seek(offset)
            data = fh.read(n)
        name = f"{f['name']}.z.part-{index:02d}"
        folder = CARRY / f"load-{load}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
        f["parts"].append({"name": name, "size": n, "sha256": hashlib.sha256(data).hexdigest(), "load": load})
    for f in files:
        Path(f.pop("src")).unlink()
    last = CARRY / f"load-{n_loads}"
    last.mkdir(parents=True, exist_ok=True)
    shutil.move(str(CARRY / "wheels"), str(last / "wheels"))
    manifest = {"room": room, "tree_bytes": tree, "limit": LIMIT, "files": files, "loads": n_loads,
                "wheels": wheel_list}
    for i in range(1, n_loads + 1):
        (CARRY / f"load-{i}" / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def load_sizes() -> dict[int, int]:
    return {int(p.name.split("-")[1]): sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
            for p in CARRY.glob("load-*") if p.is_dir()}


def plan(manifest: dict) -> str:
    """The calls to make, in order, as the device tool takes them."""
    sizes = load_sizes()
    n = manifest["loads"]
    lines = [f"working tree {manifest['tree_bytes'] / 2**20:.1f} MiB; room per call {manifest['room'] / 2**20:.1f} MiB; "
             f"wheels {sum(w['size'] for w in manifest['wheels']) / 2**20:.2f} MiB ({', '.join(w['name'] for w in manifest['wheels'])})"]
    for f in manifest["files"]:
        lines.append(f"{f['model']}: {f['name']} {f['size'] / 2**20:.1f} MiB, deflated {f['zsize'] / 2**20:.1f} MiB in {len(f['parts'])} part(s)")
    for i in range(1, n + 1):
        total = manifest["tree_bytes"] + sizes.get(i, 0)
        what = ("bash perf/gpu_check.sh" if i == n else "bash perf/gpu_check.sh --stage")
        lines.append(f"call {i} of {n}: carry [\".gpu/load-{i}\"], command `{what}`"
                     + (", timeout_s 540" if i == n else ", timeout_s 120")
                     + f"  ({total / 2**20:.1f} MiB sent)")
    if n > 1:
        lines.append("make the calls back to back: the staged parts live on the warm machine only (30 s idle)")
    return "\n".join(lines)


# --------------------------------------------------------------------------- there: stage the parts


def stage(root: Path = ROOT, into: Path | None = None) -> dict:
    """Copy the carried parts into the stage folder and join every complete GGUF; returns what is there."""
    into = Path(into or os.environ.get("GPU_CHECK_STAGE", "/tmp/ambench-gpu"))
    parts_dir, gguf_dir = into / "parts", into / "gguf"
    parts_dir.mkdir(parents=True, exist_ok=True)
    gguf_dir.mkdir(parents=True, exist_ok=True)
    loads = sorted((root / ".gpu").glob("load-*"))
    manifest = next((json.loads((d / "manifest.json").read_text()) for d in loads if (d / "manifest.json").is_file()), None)
    if manifest is None and (into / "manifest.json").is_file():
        manifest = json.loads((into / "manifest.json").read_text())
    joined = {p["name"] for f in (manifest or {}).get("files", []) if (gguf_dir / f["name"]).is_file() for p in f["parts"]}
    for load in loads:
        for f in load.iterdir():
            if ".part-" in f.name and f.name not in joined and not (parts_dir / f.name).is_file():
                shutil.copyfile(f, parts_dir / (f.name + ".tmp"))
                (parts_dir / (f.name + ".tmp")).replace(parts_dir / f.name)
        if (load / "wheels").is_dir():
            shutil.copytree(load / "wheels", into / "wheels", dirs_exist_ok=True)
    report = {"stage": str(into), "models": {}, "missing": {}}
    if manifest is None:
        return report
    (into / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    for f in manifest["files"]:
        target = gguf_dir / f["name"]
        if target.is_file() and target.stat().st_size == f["size"]:
            report["models"][f["model"]] = str(target)
            continue
        missing = sorted({p["load"] for p in f["parts"] if not (parts_dir / p["name"]).is_file()})
        if missing:
            report["missing"][f["model"]] = missing
            continue
        partial = target.with_name(target.name + ".partial")
        h = hashlib.sha256()
        z = zlib.decompressobj()
        with open(partial, "wb") as out:
            try:
                for p in f["parts"]:
                    data = z.decompress((parts_dir / p["name"]).read_bytes())
                    h.update(data)
                    out.write(data)
                data = z.flush()
            except zlib.error:
                data = b"\0"  # a damaged part: the sha256 below fails with the one sentence
            h.update(data)
            out.write(data)
        if h.hexdigest() != f["sha256"]:
            partial.unlink()
            raise SystemExit(f"{f['name']}: the joined parts do not match the packed file's sha256; pack and carry them again")
        partial.replace(target)
        for p in f["parts"]:
            (parts_dir / p["name"]).unlink()
        report["models"][f["model"]] = str(target)
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="here: write .gpu/ (wheels, model parts, one folder per call) and print the calls")
    p.add_argument("--models", default=",".join(DEFAULT_MODELS),
                   help="embedded models to carry, comma-separated ('' for the organisms only)")
    p.add_argument("--room", type=int, default=None, help="bytes per load (default: 64 MiB - working tree - 2 MiB)")
    s = sub.add_parser("stage", help="there: stage the carried parts and join complete GGUF files")
    s.add_argument("--into", default=None)
    args = ap.parse_args()
    if args.cmd == "pack":
        sys.path.insert(0, str(ROOT))
        manifest = pack([m for m in args.models.split(",") if m], args.room)
        print(plan(manifest))
    else:
        report = stage(into=args.into)
        print(json.dumps(report))


if __name__ == "__main__":
    main()
