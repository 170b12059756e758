"""Recall: what goes before a turn (atoms, persona, scene navigation), the agent tools and drill-down."""
