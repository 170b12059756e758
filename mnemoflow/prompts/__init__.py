"""Prompts as pure, versioned functions: ``context -> list[ChatMessage]`` beside the pydantic model of the reply.

One module per stage; nothing here does I/O. Each module has a ``VERSION`` so recorded outputs can say which
prompt produced them.
"""
