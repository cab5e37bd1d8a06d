"""Code extraction from model text: fences, prose, uncalled draw functions, trailing junk."""

import ast

from bench.canvas.extract import extract_code, normalise
from bench.sandbox.runtime import execute


def test_fenced_block_is_taken_and_other_languages_ignored():
    text = "Intro\n```text\nnot code\n```\n```python\nfill('red')\n```\nbye"
    assert extract_code(text) == "fill('red')"
    assert extract_code("```bash\nls\n```") is None


def test_multiple_python_blocks_are_joined_in_order():
    text = "```python\nfill('red')\n```\nthen\n```python\nrect(1, 1, 2, 2, 'blue')\n```"
    assert extract_code(text) == "fill('red')\nrect(1, 1, 2, 2, 'blue')"


def test_prose_before_and_after_is_dropped():
    text = "Sure, here it is:\nfill('white')\nrect(1, 2, 3, 4, 'red')\nNote: this draws a square.\nEnjoy!"
    assert extract_code(text) == "fill('white')\nrect(1, 2, 3, 4, 'red')"


def test_syntax_error_inside_code_is_not_hidden_by_trimming():
    code = extract_code("fill('white')\nrect(1, 2,\ncircle(3, 3, 1, 'red')")
    assert execute(code).outcome == "syntax"


def test_truncated_generation_is_a_syntax_error():
    assert execute("```python\nfill('white')\nrect(1, 2,").outcome == "syntax"


def test_uncalled_draw_function_is_called_once():
    tree = normalise(ast.parse("def draw(canvas):\n    fill('red')\n"))
    assert ast.unparse(tree.body[-1]) == "draw(None)"
    tree = normalise(ast.parse("def helper(x):\n    return x\ndef draw():\n    helper(1)\n"))
    assert [ast.unparse(n) for n in tree.body[2:]] == ["draw()"]
    tree = normalise(ast.parse("def draw():\n    pass\ndraw()\n"))
    assert len(tree.body) == 2


def test_main_guard_is_unwrapped():
    r = execute("def main():\n    fill('navy')\nif __name__ == '__main__':\n    main()")
    assert r.valid and len(r.calls) == 1


def test_no_code_outcomes():
    for text in ("", "   ", "I cannot help with that.", "Enjoy!"):
        assert execute(text).outcome == "no_code"


def test_no_program_line_is_dropped_silently():
    """A decorator line used to vanish and the rest ran; now the program is refused with a reason."""
    for text in ("```python\n@staticmethod\ndef draw():\n    fill('red')\n```", "Here:\n@cache\ndef draw():\n    fill('red')\ndraw()"):
        r = execute(text)
        assert r.outcome == "forbidden" and "decorator" in r.reason
    r = execute("```python\n\"\"\"A red canvas.\"\"\"\nfill('red')\n```")
    assert r.valid and r.code.startswith('"""A red canvas."""')


def test_underscore_names_are_ordinary_names():
    r = execute("fill('white')\nfor _ in range(3):\n    r, _ = 2 * _, 0\n    set_pixel(r, 1, 'red')\ndef _dot(r, c):\n    set_pixel(r, c, 'blue')\n_dot(5, 5)")
    assert r.valid and len(r.calls) == 5
    for bad in ("__x = 1", "_ambench_tick = 1", "f(__y=1)"):
        assert execute(bad).outcome == "forbidden"
