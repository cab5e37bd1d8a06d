"""Find the SVG document in a model's answer: fenced or not, prose around it, nested or prefixed roots.

`extract_svg(text)` returns one whole `<svg>...</svg>` element (a root start tag and its *matching*
end tag, counting nested `<svg>` elements) or None; it never returns half a document. Where it looks,
in order: the fenced code blocks (```svg, ```xml, ```html or bare; an unterminated last fence runs to
the end), then the whole text. Among the complete candidates it prefers one that parses as XML and
has child elements, then one that parses, then the first complete one (so the sanitiser can say what
is wrong with it). A root may carry a namespace prefix (`<svg:svg xmlns:svg=...>`); prose that
mentions "<svg>" before the code is skipped because that mention never closes, or does not parse.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
_START = re.compile(r"<((?:[A-Za-z_][\w.-]*:)?svg)(?=[\s/>])")
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_CDATA = re.compile(r"<!\[CDATA\[.*?\]\]>", re.S)
MAX_CANDIDATES = 32
MAX_STARTS = 64


def _matching_end(text: str, start: int, qname: str) -> int | None:
    """Index just past the end tag matching the start tag at `start` (None if it never closes)."""
    tag = re.compile(r"<!--.*?-->|<!\[CDATA\[.*?\]\]>|<(/?)" + re.escape(qname) + r"(?=[\s/>])[^>]*?(/?)>", re.S)
    depth = 0
    for m in tag.finditer(text, start):
        if m.group(0).startswith("<!"):
            continue
        closing, selfclosing = m.group(1) == "/", m.group(2) == "/"
        if closing:
            depth -= 1
            if depth == 0:
                return m.end()
        elif not selfclosing:
            depth += 1
        elif depth == 0:
            return m.end()  # <svg/> alone
    return None


def _candidates(region: str) -> list[str]:
    out = []
    masked = _CDATA.sub(lambda m: " " * len(m.group(0)), _COMMENT.sub(lambda m: " " * len(m.group(0)), region))
    for k, m in enumerate(_START.finditer(masked)):
        if k >= MAX_STARTS:  # each start scans forward: bound the work on text full of "<svg"
            break
        end = _matching_end(region, m.start(), m.group(1))
        if end is not None:
            out.append(region[m.start(): end])
        if len(out) >= MAX_CANDIDATES:
            break
    return out


def _rank(doc: str) -> int:
    try:
        root = ET.fromstring(doc)
    except (ET.ParseError, ValueError, RecursionError):
        return 2
    return 0 if len(root) else 1


def extract_svg(text: str | None) -> str | None:
    """The SVG document of `text` (see the module docstring), or None when there is no complete one."""
    text = text or ""
    regions = [m.group(2) for m in _FENCE.finditer(text) if m.group(1).lower() in ("", "svg", "xml", "html", "xhtml")]
    for region in regions + [text]:
        found = _candidates(region)
        if found:
            return min(found, key=_rank)  # stable: the first of the best rank
    return None
