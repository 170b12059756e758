"""Jinja2 rendering of the dashboard pages, with the response headers every page carries.

Autoescaping is on for every template (not only ``.html`` names) and undefined names fail loudly, so a template
cannot print user data raw by accident. The Content-Security-Policy allows scripts from this origin only: even a
value that escaped escaping could not run inline script. Mermaid writes ``<style>`` into its SVGs, hence inline
styles are allowed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, StrictUndefined

HERE = Path(__file__).parent
STATIC = HERE / "static"
MERMAID_JS = STATIC / "mermaid.min.js"
"""Mermaid's browser bundle, copied from the npm package by ``tools/install.sh`` (no CDN)."""

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",  # pages hold a tenant's memory
}

_env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=True, undefined=StrictUndefined)


def page(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """The page ``template`` rendered with ``context`` (``tenant`` None: the logged-out layout)."""
    context.setdefault("tenant", None)
    html = _env.get_template(template).render(**context)
    return HTMLResponse(html, status_code=status, headers=HEADERS)
