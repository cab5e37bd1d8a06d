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


# ---------------------------------------------------------------------------- issue 12: extraction
CIRCLE = '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 10 10"><circle cx="5" cy="5" r="4" fill="red"/></svg>'


@pytest.mark.parametrize("text, expect", [
    ("```svg\n" + CIRCLE + "\n```", CIRCLE),
    ("Sure.\n" + CIRCLE + "\nDone.", CIRCLE),
    ("I will use the <svg> element:\n```svg\n" + CIRCLE + "\n```", CIRCLE),  # prose mentions <svg> first
    ("The <svg> and </svg> tags wrap it:\n```xml\n" + CIRCLE + "\n```", CIRCLE),
    ("```svg\n" + CIRCLE, CIRCLE),  # unterminated fence
])
def test_extraction_finds_the_whole_document(text, expect):
    assert extract_svg(text) == expect


def test_extraction_handles_nested_and_prefixed_roots():
    nested = ('<svg xmlns="http://www.w3.org/2000/svg"><svg x="1" viewBox="0 0 2 2"><rect width="2" height="2"/></svg>'
              '<circle r="3"/></svg>')
    assert extract_svg("x " + nested + " y") == nested  # the non-greedy match stopped at the inner </svg>
    prefixed = '<svg:svg xmlns:svg="http://www.w3.org/2000/svg"><svg:rect width="4" height="4"/></svg:svg>'
    assert extract_svg("Here: " + prefixed) == prefixed
    assert render_attempt(prefixed)["outcome"] == "ok"


def test_extraction_never_returns_half_a_document():
    assert extract_svg('<svg xmlns="http://www.w3.org/2000/svg"><g><rect/></g>') is None
    assert "cut off" in render_attempt("```svg\n<svg><rect width='5' height='5'/>")["reason"]


# ---------------------------------------------------------------------------- editor markup and filters
INKSCAPE = ('<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n'
            '<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">\n'
            '<svg xmlns="http://www.w3.org/2000/svg" xmlns:sodipodi="http://sodipodi.sourceforge.net/DTD/sodipodi-0.dtd" '
            'xmlns:inkscape="http://www.inkscape.org/namespaces/inkscape" xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" '
            'width="64" height="64" inkscape:version="1.2">'
            '<metadata><rdf:RDF><rdf:Description rdf:about=""/></rdf:RDF></metadata>'
            '<sodipodi:namedview pagecolor="#ffffff" inkscape:zoom="4"/>'
            '<g inkscape:label="Layer 1" inkscape:groupmode="layer"><rect width="32" height="64" fill="#0000ff"/></g></svg>')


def test_editor_markup_is_stripped_not_refused():
    out = sanitise(INKSCAPE)
    assert "sodipodi" not in out and "inkscape" not in out and "metadata" not in out and "RDF" not in out
    px = render_attempt(INKSCAPE)["pixels"][24]
    assert tuple(px[12, 4]) == (0, 0, 255) and tuple(px[12, 20]) == (255, 255, 255)


@pytest.mark.parametrize("primitive", [
    '<feGaussianBlur stdDeviation="2"/>',
    '<feOffset dx="2" dy="2"/>',
    '<feDropShadow dx="2" dy="2" stdDeviation="2"/>',
    '<feGaussianBlur in="SourceAlpha" stdDeviation="3"/><feOffset dx="2" dy="2" result="o"/>'
    '<feMerge><feMergeNode in="o"/><feMergeNode in="SourceGraphic"/></feMerge>',
])
def test_drop_shadow_filters_are_allowed(primitive):
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="64" height="64"><filter id="f">{primitive}</filter>'
           '<rect x="16" y="16" width="32" height="32" fill="green" filter="url(#f)"/></svg>')
    assert render_attempt(svg)["outcome"] == "ok"


@pytest.mark.parametrize("bad, why", [
    ('<filter id="f"><feImage href="#x"/></filter>', "feImage"),
    ('<filter id="f"><feTurbulence baseFrequency="1"/></filter>', "feTurbulence"),
    ('<path d="M0 0 L1e37 1e37" stroke-width="1e37"/>', "out of range"),
    ('<g transform="scale(1e20)"><rect width="1" height="1"/></g>', "out of range"),
    ('<defs><rect id="u0" width="1" height="1"/>' + "".join(f'<use id="u{i}" href="#u{i - 1}"/>' for i in range(1, 40))
     + '</defs><use href="#u39"/>', "reference chain deeper"),
    ('<g id="a"><use href="#a"/></g>', "reference cycle"),
    ("".join('<g opacity=".99">' * 60 + '<rect width="9" height="9"/>' + "</g>" * 60 for _ in range(5)), "offscreen layers"),
    ('<style>g { opacity: .5 }</style>' + ("<g>" * 60 + "</g>" * 60) * 5, "offscreen layers"),  # layers by CSS
])
def test_bounds_refuse_what_makes_resvg_slow_or_crash(bad, why):
    with pytest.raises(SvgError, match=why):
        sanitise('<svg xmlns="http://www.w3.org/2000/svg">' + bad + "</svg>")


# ---------------------------------------------------------------------------- text and the square viewport
STOP = ('<svg xmlns="http://www.w3.org/2000/svg" width="512" height="512"><rect width="512" height="512" fill="white"/>'
        '<text x="20" y="330" font-family="Arial, Helvetica, sans-serif" font-size="200" font-weight="bold" fill="black">STOP</text></svg>')


def test_text_is_drawn_with_the_bundled_font_deterministically():
    a = render_attempt(STOP, sizes=(512, 24))
    assert a["outcome"] == "ok"
    big = a["pixels"][512]
    dark = (big.sum(axis=-1) < 200).mean()
    assert dark > 0.05  # resvg with no fonts drew nothing here: 0.0
    b = render_attempt(STOP, sizes=(512, 24))
    assert a["pixels"][512].tobytes() == b["pixels"][512].tobytes()
    assert a["pixels"][24].tobytes() == b["pixels"][24].tobytes()


def _red_extent(px):
    red = (px[..., 0] > 200) & (px[..., 1] < 80) & (px[..., 2] < 80)
    rows, cols = np.nonzero(red)
    return rows.max() - rows.min() + 1, cols.max() - cols.min() + 1, rows.mean(), cols.mean()


@pytest.mark.parametrize("root", [
    '<svg xmlns="http://www.w3.org/2000/svg" width="512" height="256" viewBox="0 0 512 256">',
    '<svg xmlns="http://www.w3.org/2000/svg" width="512" height="256">',  # no viewBox: synthesised from the size
])
def test_non_square_svg_is_letterboxed_not_stretched(root):
    svg = root + '<circle cx="256" cy="128" r="100" fill="#ff0000"/></svg>'
    px = render_attempt(svg, sizes=(512,))["pixels"][512]
    h, w, cy, cx = _red_extent(px)
    assert abs(h - w) <= 2  # a circle, not an ellipse (stretching made it 400 x 200)
    assert abs(h - 200) <= 3 and abs(cy - 255.5) <= 1.5 and abs(cx - 255.5) <= 1.5  # scale 1, centred


def test_preserve_aspect_ratio_is_honoured():
    body = '<rect width="200" height="100" fill="#ff0000"/></svg>'
    meet = render_attempt('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 200 100" preserveAspectRatio="xMinYMin meet">'
                          + body, sizes=(100,))["pixels"][100]
    h, w, cy, cx = _red_extent(meet)
    assert (h, w) == (50, 100) and cy == 24.5  # top-aligned band
    stretch = render_attempt('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 200 100" preserveAspectRatio="none">'
                             + body, sizes=(100,))["pixels"][100]
    assert _red_extent(stretch)[:2] == (100, 100)  # the author asked for stretching
