"""Where a rule's documentation link points: a page that exists, never a made-up web address.

gradguard has no public web site, so by default a link is a ``file:`` URI to the page shipped inside the
package (``rule_docs/CODE.md``, written by ``python -m gradguard.docs``): it opens wherever gradguard is
installed.  A team that hosts the pages sets ``docs-url`` in ``[tool.gradguard]`` (or the editor's
settings), and links become ``<docs-url>/CODE.md``.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

SHIPPED_DOCS = Path(__file__).resolve().parent / "rule_docs"


def shipped_page(code: str) -> Path:
    return SHIPPED_DOCS / f"{code}.md"


def is_docs_base(value: str) -> bool:
    """A ``docs-url`` must name a scheme (``https://...``, ``file:///...``): a bare path is ambiguous."""
    parts = urlsplit(value)
    return bool(parts.scheme) and bool(parts.netloc or parts.path)


def rule_doc_url(code: str, docs_url: str | None = None) -> str | None:
    """The link for rule ``code``: ``<docs_url>/CODE.md``, else the shipped page's ``file:`` URI.

    None when there is no page to point at (an input problem such as GG900, or an install without the
    pages): no link is better than a dead one.
    """
    page = shipped_page(code)
    if not page.is_file():
        return None
    if docs_url:
        return f"{docs_url.rstrip('/')}/{code}.md"
    return page.as_uri()


def is_local(url: str) -> bool:
    """A ``file:`` link works only on the machine that wrote it."""
    return urlsplit(url).scheme == "file"
