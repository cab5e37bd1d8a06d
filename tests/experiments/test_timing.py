"""The time per stage: wall and CPU seconds of each stage, printed as a table and appended as each stage ends."""

import json

from experiments.study.timing import StageTimes, format_table


def test_stages_are_timed_and_appended_as_they_end(tmp_path):
    path = tmp_path / "timings.jsonl"
    clock = StageTimes(prefix="part/", path=path, step="organisms")
    with clock.stage("busy"):
        sum(i * i for i in range(300_000))
    assert [json.loads(line)["stage"] for line in path.read_text().splitlines()] == ["part/busy"]  # written at once
    try:
        with clock.stage("fails"):
            raise RuntimeError("a stage that fails")
    except RuntimeError:
        pass
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["stage"] for r in rows] == ["part/busy", "part/fails"] and {r["step"] for r in rows} == {"organisms"}
    assert rows[0]["cpu_s"] > 0 and rows[0]["wall_s"] >= 0 and "load" in rows[0]
    table = clock.table().splitlines()
    assert table[0].split()[:3] == ["stage", "wall", "s"] and table[-1].startswith("total") and len(table) == 4
    assert format_table([]) == ""
