"""Procedural memory: skills (SOPs) distilled from finished long tasks and recalled for the next similar one.

:mod:`.model` is the skill and its Markdown file, :mod:`.tasks` reads a session's tasks (canvas, calls, failures),
:mod:`.distil` turns one into a skill without a model, :mod:`.merge` folds it into the skills that exist (skip,
merge, store), :mod:`.store` keeps the files with their history, :mod:`.learn` is the pass over a session, and
:mod:`.index` is what recall shows: a short index and a ranking.
"""
