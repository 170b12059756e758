"""The ``mnemoflow`` command: ``up`` runs the stack, ``replay`` feeds recorded conversations, ``status`` checks it."""

from mnemoflow.cli.main import app

__all__ = ["app"]
