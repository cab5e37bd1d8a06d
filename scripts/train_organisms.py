"""Retrain the committed model organisms (interp/organisms/weights/NAME), or check that a retrain is bit-identical.

    PYTHONPATH=. .venv/bin/python scripts/train_organisms.py            # retrain every organism, replace the folders
    PYTHONPATH=. .venv/bin/python scripts/train_organisms.py --check    # retrain into a temporary folder and compare
    PYTHONPATH=. .venv/bin/python scripts/train_organisms.py tracker    # only some organisms

Run it after changing anything `interp.organisms.zoo.code_version(NAME)` hashes (the tokenizer, the data
and training modules, an organism's generator module or training config): the committed folders record
the code version they were built by, `organism:NAME` ignores a stale one (it trains into the cache instead), and
tests/interp/test_organisms.py fails until they are rebuilt. Each organism is trained with the default
seed, one torch thread (the setting recorded in its training.json), so `--check` reproduces the committed
weights bit for bit on the same torch build and CPU type; it prints each organism's time and load.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    from interp.organisms import WEIGHTS, build_folder, record
    from interp.runtime import evaluate_organism
    from interp.organisms.zoo import DEFAULT_SEED, ORGANISMS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help=f"organisms to train (default: all of {', '.join(ORGANISMS)})")
    ap.add_argument("--check", action="store_true", help="retrain into a temporary folder and compare weight hashes")
    args = ap.parse_args()
    names = args.names or list(ORGANISMS)
    unknown = [n for n in names if n not in ORGANISMS]
    if unknown:
        print(f"unknown organism(s) {', '.join(unknown)}: use {', '.join(ORGANISMS)}", file=sys.stderr)
        return 2
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            started = time.time()
            out = Path(tmp) / name
            rec = build_folder(name, out, DEFAULT_SEED, lambda step, loss: print(f"  {name} step {step} loss {loss:.5f}",
                                                                          file=sys.stderr, flush=True),
                               evaluate_organism)
            line = {"organism": name, "seconds": round(time.time() - started, 1), "train_seconds": rec["seconds"]["train"],
                    "train_cpu_seconds": rec["seconds"]["train_cpu"], "load": rec["machine"]["loadavg_start"],
                    "final_train_loss": rec["final_train_loss"], "heldout_accuracy": rec["eval"]["heldout_accuracy"],
                    "weights_sha256": rec["weights_sha256"][:16]}
            if args.check:
                old = record(WEIGHTS / name)
                same = old is not None and old["weights_sha256"] == rec["weights_sha256"]
                line["bit_identical"] = same
                failed += not same
            else:
                target = WEIGHTS / name
                if target.exists():
                    shutil.rmtree(target)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copytree(out, target)
            print(json.dumps(line), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
