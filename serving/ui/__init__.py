"""The web dashboard at ``/ui``: server-rendered pages over the same reads as the JSON routes, for people.

A person logs in with a tenant's API key (kept in an HttpOnly cookie) and sees that tenant only: users with their
persona, scenes and atoms (search, filters, drill-down to the L0 messages), sessions with their canvases drawn by
Mermaid (each node drills down to its offload entries and raw outputs), the skills (edited and deleted here too,
each step drilling down to its canvas node), and the stack's health. Every value is user data and goes through
Jinja2's autoescaping; the pages allow no inline script (Content-Security-Policy).
"""

from serving.ui.pages import install_ui

__all__ = ["install_ui"]
