"""Seeded generator of typical model answers (prose + fenced canvas program, 5-25 calls, some loops)."""

from __future__ import annotations

import random

COLORS = ["red", "blue", "green", "yellow", "orange", "purple", "black", "white", "brown", "gray", "sky_blue", "gold"]


def typical_program(rng: random.Random) -> str:
    lines = [f"fill('{rng.choice(COLORS)}')"]
    for _ in range(rng.randint(4, 18)):
        kind = rng.choice(["rect", "rect", "circle", "line", "poly", "set_pixel"])
        col = rng.choice(COLORS)
        r, c = rng.randint(0, 23), rng.randint(0, 23)
        if kind == "rect":
            lines.append(f"rect({r}, {c}, {rng.randint(1, 10)}, {rng.randint(1, 10)}, '{col}')")
        elif kind == "circle":
            lines.append(f"circle({r}, {c}, {rng.randint(1, 7)}, '{col}')")
        elif kind == "line":
            lines.append(f"line({r}, {c}, {rng.randint(0, 23)}, {rng.randint(0, 23)}, '{col}')")
        elif kind == "poly":
            pts = ", ".join(f"({rng.randint(0, 23)}, {rng.randint(0, 23)})" for _ in range(rng.randint(3, 6)))
            lines.append(f"poly([{pts}], '{col}')")
        else:
            lines.append(f"set_pixel({r}, {c}, '{col}')")
    if rng.random() < 0.5:
        lines.append(f"for i in range({rng.randint(2, 8)}):\n    rect(i * 3, {rng.randint(0, 20)}, 2, 2, '{rng.choice(COLORS)}')")
    body = "\n".join(lines)
    return f"Here is the drawing program:\n```python\n{body}\n```\nThis draws the requested picture."


def typical_programs(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [typical_program(rng) for _ in range(n)]
