"""``python -m mnemoflow.cli`` is the ``mnemoflow`` command."""

from mnemoflow.cli import app

app()
