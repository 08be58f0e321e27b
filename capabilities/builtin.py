"""The capabilities this deployment ships; importing this module registers each of them."""

from . import channel_tools, clock, context, conversation_search, knowledge, memory_files, planning, thinking  # noqa: F401
