"""The settings record of a run (config.json): read whole or refused with the way out, and a stage continued only
with the settings it started with."""

from __future__ import annotations

import json
from typing import Any

from experiments.run_errors import RunError


class SettingsRecord:
    """The settings methods of `RunDir` (experiments/rundir.py), which gives them its file names, JSON files and lock."""

    def config(self) -> dict[str, Any]:
        """The settings record (config.json; empty when absent). A damaged one is refused with the way out: nothing
        can rebuild it from the rows (`ambench repair` once answered "nothing to repair" while `run` refused it)."""
        how = ("`ambench repair` cannot rebuild a run's settings record: restore config.json from a copy of the run, or "
               "run again into another --out")
        try:
            cfg = self.json(self.CONFIG)
        except RunError as e:
            raise RunError(f"{e}; {how}") from None
        if cfg is None:
            return {}
        if not isinstance(cfg, dict):
            raise RunError(f"{self.file(self.CONFIG)} is not a JSON object; the file was edited or corrupted; {how}")
        return cfg

    def record_config(self, section: str, settings: dict[str, Any], fresh: bool = False) -> None:
        """Record a stage's settings in config.json; refuse to continue a stage with other settings. `fresh`: the
        stage has no rows here yet (nothing its settings made would be dropped or mixed), so new settings replace
        the record."""
        self._need_lock()
        settings = json.loads(json.dumps(settings))  # as config.json holds it (tuples are lists)
        config = self.config()
        stages = config.setdefault("stages", {})
        old = stages.get(section)
        if fresh and old is not None and old != settings:
            stages[section] = settings
            self.write_json(self.CONFIG, config)
            return
        if old is not None and old != settings:
            changed = sorted(_diff(old, settings))
            raise RunError(f"{self.path} already has stage {section!r} with other settings ({', '.join(changed)}); "
                           "repeat its settings, or use another --out to change them")
        if old is None:
            stages[section] = settings
            self.write_json(self.CONFIG, config)

    def record_shard(self, i: int, n: int, phase: str) -> None:
        """Record which shard of `ambench run --shard i/n` this directory holds and the model phase it reached
        ("a": generation and capture; "b": interventions and patching too), for `ambench merge`."""
        self._need_lock()
        config = self.config()
        config["shard"] = {"i": i, "n": n, "phase": phase}
        self.write_json(self.CONFIG, config)


def _diff(a: Any, b: Any, prefix: str = "") -> list[str]:
    """Dotted names of the keys whose values differ between two nested dicts."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for k in set(a) | set(b):
            out += _diff(a.get(k), b.get(k), f"{prefix}{k}.")
        return out
    return [] if a == b else [prefix.rstrip(".")]
