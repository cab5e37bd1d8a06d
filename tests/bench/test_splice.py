"""Splicing: statements by tokenize, byte-preserving number rewrites, arms, continuation classification."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.intervene.splice import (SpliceError, check_splice, choose_displacements, continued_drawing,
                                    count_primitive_calls, cut_arms, move, shape_mask, statements, strip_digits)

ANSWER = """Sure! Here it is:
```python
fill('white')
rect(2, 3, 4, 5, 'red')  # a box
circle(12, 12, 3, 'blue')
for i in range(3):
    rect(i, 0, 1, 1, 'black')
line(0, 0, 23, 23, '#102030')
poly([(1, 1), (5, 1), (5, 9)], (10, 20, 30))
rect(x, 2, 3, 4, 'red')
```
Enjoy."""


def test_statements_and_literals():
    s = statements(ANSWER)
    assert [x.name for x in s] == ["fill", "rect", "circle", "line", "poly", "rect"]  # the indented rect is inside a loop
    assert [x.spliceable for x in s] == [False, True, True, True, True, False]
    rect = s[1]
    assert ANSWER[rect.start:rect.end] == "rect(2, 3, 4, 5, 'red')"
    assert [(l.value, l.axis) for l in rect.literals] == [(2, "r"), (3, "c")]
    assert [(l.value, l.axis) for l in s[3].literals] == [(0, "r"), (0, "c"), (23, "r"), (23, "c")]
    assert [l.value for l in s[4].literals] == [1, 1, 5, 1, 5, 9]  # colour tuple numbers are not positions
    assert ANSWER[rect.line_end - 1] == "\n" and "# a box" in ANSWER[rect.end:rect.line_end]


def test_move_changes_only_the_numbers():
    s = statements(ANSWER)
    moved = move(ANSWER, s[1], 7, 8)
    assert "rect(9, 11, 4, 5, 'red')" in moved and strip_digits(moved) == strip_digits(ANSWER)
    moved = move(ANSWER, s[4], 2, 3)
    assert "poly([(3, 4), (7, 4), (7, 12)], (10, 20, 30))" in moved
    with pytest.raises(ValueError, match="negative"):
        move(ANSWER, s[1], -5, 0)
    with pytest.raises(ValueError, match="not spliceable"):
        move(ANSWER, s[0], 1, 1)
    with pytest.raises(SpliceError):
        check_splice("rect(1, 2)", "rect(1, 2) ")


@given(st.integers(0, 30), st.integers(0, 30), st.integers(0, 12), st.integers(0, 12))
def test_splice_is_byte_preserving_for_any_move(r, c, dr, dc):
    text = f"```python\nfill('navy')\nrect({r}, {c}, 3, 4, 'gold')\nline(1, 2, 3, 4, 'red')\n```"
    s = statements(text)[1]
    out = move(text, s, dr, dc)
    assert strip_digits(out) == strip_digits(text) and f"rect({r + dr}, {c + dc}, 3, 4, 'gold')" in out


def test_arms_and_displacements():
    text = "```python\nfill('white')\nrect(2, 2, 4, 4, 'red')\nrect(2, 10, 6, 6, 'blue')\n```"
    s = statements(text)
    painted = np.zeros((24, 24), bool)
    painted[2:6, 2:6] = True
    painted[2:8, 10:16] = True
    arms = {a.arm: a for a in cut_arms(text, s[1], painted)}
    assert set(arms) == {"null-empty", "null-asis", "moved-used", "moved-unused"}
    assert arms["null-asis"].prefix.endswith("rect(2, 2, 4, 4, 'red')\n")
    assert arms["null-empty"].prefix.endswith("fill('white')\n")
    used, unused = arms["moved-used"], arms["moved-unused"]
    assert used.overlap >= 0.5 and unused.overlap <= 0.1 and used.distance >= 2 and unused.distance >= 2
    for a in (used, unused):
        check_splice(arms["null-asis"].prefix, a.prefix)
        m = shape_mask(statements(a.prefix + "```")[1])
        assert m.sum() == 16 and abs((m & painted).sum() / 16 - a.overlap) < 1e-9
    # the nearest qualifying move is chosen: no shorter in-canvas move has half its cells painted
    import math

    for dr in range(-12, 13):
        for dc in range(-12, 13):
            d = math.hypot(dr, dc)
            if 2 <= d < used.distance and 0 <= 2 + dr and 0 <= 2 + dc:
                m = shape_mask(s[1], dr, dc)
                assert m.sum() < 16 or (m & painted).sum() / 16 < 0.5
    assert choose_displacements(s[0], painted) == {"moved-used": None, "moved-unused": None}


def test_continuation_classification():
    assert continued_drawing("circle(3, 3, 2, 'red')\n```")
    assert continued_drawing("for i in range(2):\n    rect(i, i, 1, 1, 'red')\n")
    assert not continued_drawing("```\nThat draws a house.")
    assert not continued_drawing("# done\n```\nrect(1, 1, 1, 1, 'red')")
    assert not continued_drawing("print('rect(1, 2)')")  # a string is not a call
    assert count_primitive_calls("rect(1, 2, 3, 4, 'red')\nline(0, 0, 1, 1, 'b'") == 2


@pytest.mark.parametrize("sep", ["\x0c", "\u2028", "\u2029", "\x0b", "\x1c", "\x85"])
def test_line_separators_inside_the_program_keep_offsets_right(sep):
    """str.splitlines splits at these characters but Python source does not: the offsets once shifted and
    every later splice failed its identity check (aborting the stage)."""
    text = f"```python\nfill('white')  # sky{sep}ground\nrect(2, 3, 4, 5, 'red')  # box\n```"
    s = [x for x in statements(text) if x.spliceable][0]
    assert text[s.start:s.end] == "rect(2, 3, 4, 5, 'red')" and s.comment and not s.code_after
    out = move(text, s, 1, 1)
    assert "rect(3, 4, 4, 5, 'red')  # box" in out and strip_digits(out) == strip_digits(text)


def test_comment_and_code_after_flags():
    text = "```python\nfill('white')\nrect(2, 3, 4, 5, 'red')\n# done\nfor i in range(2):\n    set_pixel(i, i, 'red')\n```"
    s = statements(text)
    assert [(x.name, x.comment, x.code_after) for x in s] == [("fill", False, True), ("rect", False, True)]
    text = "```python\nfill('white')\nrect(2, 3, 4, 5, 'red')  # last\n# a closing remark\n```"
    assert [(x.comment, x.code_after) for x in statements(text)] == [(False, True), (True, False)]


def test_a_new_moved_arm_is_one_rule(monkeypatch):
    """The worked example of docs/extending.md: a far move off the picture is one MoveRule; cut_arms makes it."""
    import bench.intervene.splice as sp

    far = sp.MoveRule("moved-far", max_overlap=0.1, min_distance=8.0)
    monkeypatch.setattr(sp, "MOVES", sp.MOVES + (far,))
    text = "```python\nfill('white')\nrect(2, 2, 4, 4, 'red')\nrect(2, 10, 6, 6, 'blue')\n```"
    s = sp.statements(text)[-1]
    painted = np.zeros((24, 24), bool)
    painted[2:6, 2:6] = painted[2:8, 10:16] = True
    got = sp.choose_displacements(s, painted, moves=sp.MOVES)
    assert set(got) == {"moved-used", "moved-unused", "moved-far"} and got["moved-far"][2] >= 8.0
    assert got["moved-far"][3] <= 0.1 and got["moved-unused"][2] < got["moved-far"][2]
