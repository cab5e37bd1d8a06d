"""The SVG medium: the sanitiser refuses what it must, resvg renders at native size and at 24x24."""

import numpy as np
import pytest

from bench.svg.medium import SvgError, extract_svg, rasterise, render_attempt, sanitise

FLAG = ('<svg xmlns="http://www.w3.org/2000/svg" width="512" height="512" viewBox="0 0 512 512">'
        '<rect width="512" height="512" fill="white"/><rect y="0" width="512" height="256" fill="#ff0000"/></svg>')


def test_render_native_and_24():
    out = render_attempt("Here you go:\n```svg\n" + FLAG + "\n```")
    assert out["outcome"] == "ok"
    small, big = out["pixels"][24], out["pixels"][512]
    assert small.shape == (24, 24, 3) and big.shape == (512, 512, 3)
    assert tuple(small[2, 12]) == (255, 0, 0) and tuple(small[20, 12]) == (255, 255, 255)
    assert tuple(big[100, 100]) == (255, 0, 0)


def test_defs_use_and_patterns_are_allowed():
    svg = ('<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="512" height="512">'
           '<defs><pattern id="p" width="64" height="64" patternUnits="userSpaceOnUse"><circle cx="32" cy="32" r="16" fill="blue"/>'
           '</pattern><circle id="c" r="40" fill="green"/></defs><rect width="512" height="512" fill="url(#p)"/>'
           '<use xlink:href="#c" x="256" y="256"/></svg>')
    assert sanitise(svg) == svg
    px = rasterise(svg, 24)
    assert px.shape == (24, 24, 3) and len(np.unique(px.reshape(-1, 3), axis=0)) > 2


@pytest.mark.parametrize("bad, why", [
    ('<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>', "<script> is not allowed"),
    ('<svg xmlns="http://www.w3.org/2000/svg"><foreignObject/></svg>', "<foreignObject> is not allowed"),
    ('<svg xmlns="http://www.w3.org/2000/svg"><image href="http://x/y.png"/></svg>', "<image> is not allowed"),
    ('<svg xmlns="http://www.w3.org/2000/svg"><rect onclick="x()"/></svg>', "event attribute"),
    ('<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"><use xlink:href="file:///etc/passwd#a"/></svg>', "external reference"),
    ('<svg xmlns="http://www.w3.org/2000/svg"><rect fill="url(http://evil/p.svg#g)"/></svg>', "external url"),
    ('<svg xmlns="http://www.w3.org/2000/svg"><rect style="fill: url(\'https://e/x\')"/></svg>', "external url"),
    ('<svg xmlns="http://www.w3.org/2000/svg"><style>@import url(http://e/x.css);</style></svg>', "external references in <style>"),
    ('<!DOCTYPE svg [<!ENTITY a "aaaa">]><svg xmlns="http://www.w3.org/2000/svg">&a;</svg>', "DOCTYPE"),
    ('<svg xmlns="http://www.w3.org/2000/svg"><rect></svg>', "not well-formed"),
    ("just words", "no <svg>"),
    ('<svg xmlns="http://www.w3.org/2000/svg">' + "<g>" * 70 + "</g>" * 70 + "</svg>", "nested deeper"),
    ('<svg xmlns="http://www.w3.org/2000/svg">' + "<rect/>" * 6000 + "</svg>", "more than 5000 elements"),
    ('<svg xmlns="http://www.w3.org/2000/svg">' + " " * 100_001 + "</svg>", "over 100000 bytes"),
])
def test_sanitiser_refuses(bad, why):
    with pytest.raises(SvgError, match=why):
        sanitise(bad)
    assert render_attempt(bad)["outcome"] == "svg"


def test_extract_picks_the_document():
    assert extract_svg("a <svg>x</svg> b <svg>y</svg>") == "<svg>x</svg>"
