"""The capabilities this deployment ships; importing this module registers each of them."""

from . import channel_tools, clock, guardrails, memory_files, system_reminders, thinking, tool_output_limits, tool_search  # noqa: F401
