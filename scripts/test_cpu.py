"""Sum the CPU seconds per test that `AMBENCH_TEST_CPU=FILE ./test.sh` recorded (tests/conftest.py).

    python scripts/test_cpu.py FILE [--top N]

Prints the suite's CPU seconds (what two cores must spend), then the N costliest files and tests.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    try:
        rows = [json.loads(line) for line in open(a.file, encoding="utf-8") if line.strip()]
    except (OSError, ValueError) as e:
        print(f"test_cpu: cannot read {a.file}: {e}", file=sys.stderr)
        return 2
    cpu = sum(r["cpu_s"] for r in rows)
    wall = sum(r["wall_s"] for r in rows)
    print(f"{len(rows)} tests: {cpu:.0f} CPU s, {wall:.0f} test-wall s (summed over workers)")
    by_file: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for r in rows:
        f = by_file[r["test"].split("::")[0]]
        f[0] += r["cpu_s"]
        f[1] += r["wall_s"]
        f[2] += 1
    print("\n  CPU s   wall s  tests  file")
    for name, (c, w, n) in sorted(by_file.items(), key=lambda kv: -kv[1][0])[: a.top]:
        print(f"{c:7.1f}  {w:7.1f}  {n:5d}  {name}")
    print("\n  CPU s   wall s  test")
    for r in sorted(rows, key=lambda r: -r["cpu_s"])[: a.top]:
        print(f"{r['cpu_s']:7.1f}  {r['wall_s']:7.1f}  {r['test']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
