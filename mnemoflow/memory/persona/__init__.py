"""L3: ``persona.md``, written from the scenes, and when to write it again."""
