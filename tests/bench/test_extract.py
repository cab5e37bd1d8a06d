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
