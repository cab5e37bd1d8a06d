"""The SVG sanitiser: an allow-list of elements plus bounds on what makes rendering slow or unsafe.

`sanitise_tree(text)` extracts the document (bench.svg.extract) and accepts it only when:
- it is at most `MAX_BYTES` and `MAX_ELEMENTS` elements, nested at most `MAX_DEPTH` deep;
- it has no internal DTD subset, entity declaration or processing instruction (no entity expansion,
  no external DTD). A DOCTYPE with only a public identifier (SVG 1.1 files from design tools) is
  outside the extracted element and is simply dropped;
- every element is in the allow-list: shapes, paths, text, groups, defs/use/symbol, gradients,
  patterns, clip paths, masks, markers, style, title/desc, and filters built only from the
  primitives in `FILTER_PRIMITIVES` (blur, offset, drop shadow, flood, merge, blend, composite,
  colour matrix, component transfer). No script, foreignObject, image, iframe, animation, feImage;
- no attribute is an event handler (`on...`); every reference (`href`, `xlink:href`, `url(...)` in
  attributes, `style` and `<style>`) is local (`#id`); no `@import` in a style sheet;
- no number in an attribute or style sheet is larger than `MAX_NUMBER` in magnitude (resvg panics on
  coordinates like 1e37);
- the reference graph is acyclic and its chains (`use`, `mask`, `pattern`, `clipPath`, `marker`,
  `filter`, gradient `href`) are at most `MAX_REF_DEPTH` long (a 200-link `<use>` chain or 400 chained
  masks crashed resvg with SIGSEGV);
- the document *as rendered* stays small: every reference is expanded (a marker once per vertex of
  the path that uses it), and the expanded element count must stay under `MAX_EXPANDED` and the
  expanded count of offscreen layers (group opacity, filter, mask, clip path, blend mode; a filter
  counts `FILTER_WEIGHT`) under `MAX_LAYERS` (40 stacks of 60 nested `<g opacity=".99">` took 35 s).
Harmless editor markup is removed instead of refused: `<metadata>` (RDF included), elements and
attributes of editor namespaces (Inkscape, Sodipodi, Illustrator, ...), and elements of any other
non-SVG namespace (no renderer draws them). An SVG without `xmlns` gets the SVG namespace, as a
browser reading it inline would. Otherwise `SvgError` says what is wrong (the attempt is invalid,
outcome `svg`, with that reason). These bounds make refusals clean and early; the worker's CPU and
memory limits remain the last word on what a render may cost.
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from bench.svg.extract import extract_svg

SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"
XML_NS = "http://www.w3.org/XML/1998/namespace"
ET.register_namespace("", SVG_NS)
ET.register_namespace("xlink", XLINK_NS)

MAX_BYTES = 100_000
MAX_ELEMENTS = 5_000
MAX_DEPTH = 64
MAX_NUMBER = 1e6
MAX_REF_DEPTH = 12
MAX_EXPANDED = 20_000
MAX_LAYERS = 256
FILTER_WEIGHT = 4
MAX_CSS_RULES = 1_000

FILTER_PRIMITIVES = frozenset({
    "feGaussianBlur", "feOffset", "feDropShadow", "feFlood", "feMerge", "feMergeNode", "feBlend", "feComposite",
    "feColorMatrix", "feComponentTransfer", "feFuncR", "feFuncG", "feFuncB", "feFuncA",
})
ALLOWED = frozenset({
    "svg", "g", "defs", "use", "symbol", "title", "desc", "rect", "circle", "ellipse", "line", "polyline",
    "polygon", "path", "text", "tspan", "textPath", "linearGradient", "radialGradient", "stop", "pattern", "clipPath",
    "mask", "style", "marker", "filter", "switch",
}) | FILTER_PRIMITIVES
#: removed rather than refused: not rendered by anyone, common in files saved by design tools
STRIPPED = frozenset({"metadata"})
_LAYER_PROPS = ("opacity", "filter", "mask", "clip-path", "mix-blend-mode", "isolation")
_MARKER_PROPS = ("marker-start", "marker-mid", "marker-end", "marker")
_URL = re.compile(r"url\(\s*['\"]?\s*([^)'\"\s]*)", re.I)
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_NOT_A_NUMBER = re.compile(r"#[0-9a-fA-F]{3,8}\b|url\([^)]*\)", re.I)  # hex colours, references
_NOT_NUMERIC = frozenset({"id", "class", "href", "font-family", "lang", "space", "base", "role"})
_DECL = re.compile(r"([-\w]+)\s*:\s*([^;]*)")
_CSS_RULE = re.compile(r"([^{}]+)\{([^{}]*)\}")
_CSS_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_SIMPLE = re.compile(r"([.#]?)(-?[_a-zA-Z][-\w]*|\*)")


class SvgError(ValueError):
    """SVG that is refused or cannot be rendered."""


@dataclass
class Sanitised:
    """A checked document: the element tree (SVG namespace throughout) and what the checks measured."""

    root: ET.Element
    text: str  #: the document as accepted: the extracted text itself when nothing had to be removed
    elements: int = 0
    expanded: int = 0  #: elements with every reference expanded
    layers: int = 0  #: offscreen layers with every reference expanded
    ref_depth: int = 0
    stripped: list[str] = field(default_factory=list)


def _local(ref: str) -> bool:
    return ref.startswith("#") and len(ref) > 1


def _split(tag: object) -> tuple[str | None, str]:
    if not isinstance(tag, str):
        return None, ""
    if tag.startswith("{"):
        ns, _, local = tag[1:].partition("}")
        return ns, local
    return None, tag


def _decls(text: str) -> list[tuple[str, str]]:
    return [(k.strip().lower(), v.strip()) for k, v in _DECL.findall(text or "")]


def _check_numbers(value: str, where: str) -> None:
    for m in _NUMBER.finditer(_NOT_A_NUMBER.sub(" ", value)):
        try:
            v = float(m.group(0))
        except ValueError:
            continue
        if not abs(v) <= MAX_NUMBER:  # also catches inf and nan
            raise SvgError(f"number {m.group(0)[:24]} in {where} is out of range (|x| <= {MAX_NUMBER:g})")


def _check_refs(value: str, where: str) -> None:
    for ref in _URL.findall(value):
        if not _local(ref):
            raise SvgError(f"external url({ref[:60]}) is not allowed")


class _Css:
    """The rules of the document's style sheets, indexed by the last compound selector's tag, id and class."""

    def __init__(self) -> None:
        self.by_tag: dict[str, list[list[tuple[str, str]]]] = {}
        self.by_id: dict[str, list[list[tuple[str, str]]]] = {}
        self.by_class: dict[str, list[list[tuple[str, str]]]] = {}
        self.universal: list[list[tuple[str, str]]] = []
        self.n = 0

    def add(self, sheet: str) -> None:
        for selectors, body in _CSS_RULE.findall(_CSS_COMMENT.sub(" ", sheet)):
            self.n += 1
            if self.n > MAX_CSS_RULES:
                raise SvgError(f"more than {MAX_CSS_RULES} style rules")
            decls = _decls(body)
            if not any(k in _LAYER_PROPS or k in _MARKER_PROPS or "url(" in v for k, v in decls):
                continue  # only rules that add layers or references matter to the cost model
            for sel in selectors.split(","):
                parts = re.split(r"[\s>+~]+", sel.strip())
                last = re.sub(r"::?[-\w]+(\([^)]*\))?|\[[^\]]*\]", "", parts[-1] if parts else "")
                keys = _SIMPLE.findall(last)
                if not keys or any(name == "*" for _, name in keys):
                    self.universal.append(decls)
                    continue
                kind, name = next(((k, n) for k, n in keys if k == "#"), None) or next(
                    ((k, n) for k, n in keys if k == "."), None) or keys[0]
                index = {"#": self.by_id, ".": self.by_class, "": self.by_tag}[kind]
                index.setdefault(name, []).append(decls)

    def matching(self, tag: str, el: ET.Element) -> list[tuple[str, str]]:
        # over-approximates (any rule whose key selector could match): the cost model may only over-count
        out = [d for rules in self.universal for d in rules]
        for rules in self.by_tag.get(tag, ()):
            out.extend(rules)
        ident = el.get("id")
        if ident:
            for rules in self.by_id.get(ident, ()):
                out.extend(rules)
        for cls in (el.get("class") or "").split():
            for rules in self.by_class.get(cls, ()):
                out.extend(rules)
        return out


def _vertices(tag: str, el: ET.Element) -> int:
    if tag == "path":
        return len(_NUMBER.findall(el.get("d") or "")) // 2 + 1
    if tag in ("polyline", "polygon"):
        return len(_NUMBER.findall(el.get("points") or "")) // 2
    if tag == "line":
        return 2
    return 0


def _layering(decls: list[tuple[str, str]]) -> int:
    n = 0
    for k, v in decls:
        v = v.strip().lower()
        if k == "opacity":
            try:
                n += float(v.rstrip("%")) / (100 if v.endswith("%") else 1) < 1
            except ValueError:
                pass
        elif k == "filter" and v not in ("", "none"):
            n += FILTER_WEIGHT
        elif k in ("mask", "clip-path") and v not in ("", "none"):
            n += 1
        elif k == "mix-blend-mode" and v not in ("", "normal"):
            n += 1
        elif k == "isolation" and v == "isolate":
            n += 1
    return n


def sanitise_tree(text: str | None) -> Sanitised:
    """Extract and check the SVG document in `text` (see the module docstring); raise SvgError if refused."""
    text = text or ""
    if re.search(r"<!ENTITY|<!DOCTYPE[^>\[]*\[", text, re.I):
        raise SvgError("DOCTYPE internal subsets and entities are not allowed")
    doc = extract_svg(text)
    if doc is None:
        cut = " (an <svg> start tag never closes: the answer may be cut off)" if re.search(r"<(\w+:)?svg\b", text) else ""
        raise SvgError("no <svg>...</svg> document in the text" + cut)
    if len(doc.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise SvgError(f"SVG over {MAX_BYTES} bytes")
    if re.search(r"<!DOCTYPE|<!ENTITY|<\?", doc, re.I):
        raise SvgError("DOCTYPE, entities and processing instructions are not allowed inside the document")
    try:
        root = ET.fromstring(doc)
    except ET.ParseError as e:
        raise SvgError(f"not well-formed XML ({e})") from None
    except (ValueError, RecursionError) as e:
        raise SvgError(f"not well-formed XML ({type(e).__name__})") from None
    out = Sanitised(root, doc)
    changed = False
    css = _Css()
    ids: dict[str, ET.Element] = {}
    tags: dict[int, str] = {}
    # depth-first with an explicit stack: (element, parent, depth)
    stack: list[tuple[ET.Element, ET.Element | None, int]] = [(root, None, 0)]
    while stack:
        el, parent, depth = stack.pop()
        ns, tag = _split(el.tag)
        if ns not in (None, SVG_NS) or tag in STRIPPED:
            if parent is None:
                raise SvgError(f"the root element is <{tag}>, not <svg>")
            parent.remove(el)  # editor markup (sodipodi:namedview, metadata/RDF, ...): never rendered
            out.stripped.append(tag)
            changed = True
            continue
        out.elements += 1
        if out.elements > MAX_ELEMENTS:
            raise SvgError(f"more than {MAX_ELEMENTS} elements")
        if depth > MAX_DEPTH:
            raise SvgError(f"nested deeper than {MAX_DEPTH}")
        if tag not in ALLOWED:
            if tag.startswith("fe"):
                raise SvgError(f"filter primitive <{tag}> is not allowed (allowed: {', '.join(sorted(FILTER_PRIMITIVES))})")
            raise SvgError(f"element <{tag}> is not allowed")
        if ns is None:
            el.tag = f"{{{SVG_NS}}}{tag}"
            changed = True
        tags[id(el)] = tag
        for k in list(el.attrib):
            v = el.attrib[k]
            ans, name = _split(k)
            lname = name.lower()
            if ans not in (None, XLINK_NS, XML_NS):
                del el.attrib[k]  # inkscape:label, sodipodi:nodetypes, ...: editor bookkeeping
                changed = True
                continue
            if lname.startswith("on"):
                raise SvgError(f"event attribute {lname!r} is not allowed")
            if lname == "href" and not _local(v.strip()):
                raise SvgError(f"external reference {v[:60]!r} is not allowed")
            _check_refs(v, lname)
            if lname not in _NOT_NUMERIC:
                _check_numbers(v, f"attribute {lname}")
        if el.get("id"):
            ids.setdefault(el.get("id"), el)
        if tag == "style":
            body = el.text or ""
            if "@import" in body.lower() or any(not _local(r) for r in _URL.findall(body)):
                raise SvgError("external references in <style> are not allowed")
            for _, decls in _CSS_RULE.findall(_CSS_COMMENT.sub(" ", body)):
                _check_numbers(decls, "<style>")
            css.add(body)
        for child in reversed(list(el)):
            stack.append((child, el, depth + 1))
    _measure(out, root, ids, tags, css)
    if changed:
        out.text = ET.tostring(root, encoding="unicode")
    return out


def _measure(out: Sanitised, root: ET.Element, ids: dict[str, ET.Element], tags: dict[int, str], css: _Css) -> None:
    """Expanded element count, layer count and reference depth, every reference followed (memoised)."""
    memo: dict[int, tuple[int, int, int]] = {}
    active: set[int] = set()

    def refs(el: ET.Element, tag: str) -> tuple[list[tuple[str, int]], int]:
        decls = [(k.split("}")[-1].lower(), v) for k, v in el.attrib.items()] + _decls(el.get("style") or "")
        if css.n:
            decls += css.matching(tag, el)
        found: list[tuple[str, int]] = []
        href = el.get("href") or el.get(f"{{{XLINK_NS}}}href")
        if href and _local(href.strip()):
            found.append((href.strip()[1:], 1))
        verts = None
        for k, v in decls:
            for ref in _URL.findall(v):
                if not _local(ref):
                    continue
                mult = 1
                if k in _MARKER_PROPS:
                    verts = _vertices(tag, el) if verts is None else verts
                    mult = max(verts - 2, 1) if k == "marker-mid" else (verts if k == "marker" else 1)
                found.append((ref[1:], mult))
        return found, _layering(decls)

    def cost(el: ET.Element) -> tuple[int, int, int]:
        key = id(el)
        if key in memo:
            return memo[key]
        if key in active:
            raise SvgError(f"reference cycle through #{el.get('id') or '?'}")
        active.add(key)
        tag = tags.get(key, "")
        found, layers = refs(el, tag)
        elements, depth = 1, 0
        for child in el:
            if id(child) not in tags:
                continue
            e, l, d = cost(child)
            elements, layers, depth = elements + e, layers + l, max(depth, d)
        for ident, mult in found:
            target = ids.get(ident)
            if target is None:
                continue
            e, l, d = cost(target)
            elements, layers, depth = elements + mult * e, layers + mult * l, max(depth, d + 1)
            if depth > MAX_REF_DEPTH:
                raise SvgError(f"reference chain deeper than {MAX_REF_DEPTH} (use/mask/pattern/clipPath/marker/filter/href)")
        if elements > MAX_EXPANDED:
            raise SvgError(f"expands to more than {MAX_EXPANDED} elements once references and markers are followed")
        if layers > MAX_LAYERS:
            raise SvgError(f"more than {MAX_LAYERS} offscreen layers (group opacity, filters, masks, clips) once expanded")
        active.discard(key)
        memo[key] = (elements, layers, depth)
        return memo[key]

    old = sys.getrecursionlimit()
    # bounded by construction: tree depth <= MAX_DEPTH, times MAX_REF_DEPTH + 1 reference hops
    sys.setrecursionlimit(max(old, (MAX_DEPTH + 2) * (MAX_REF_DEPTH + 2) * 2 + 200))
    try:
        out.expanded, out.layers, out.ref_depth = cost(root)
    finally:
        sys.setrecursionlimit(old)


def sanitise(text: str | None) -> str:
    """The accepted SVG document of `text` as a string (unchanged when nothing had to be removed)."""
    return sanitise_tree(text).text
