"""Where each command is explained: the page of the documentation site (``docs/``, built by ``make docs``) that its
``--help`` names, so that a reader of the help knows where the rest is. ``tests/unit/test_docs.py`` checks that
every command names a page that exists."""

from __future__ import annotations


def see(page: str) -> str:
    """The epilog of a command's help: its page, by its path in the repository."""
    return f"Explained in docs/{page} (the documentation site: make docs)."
