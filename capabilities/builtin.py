"""The capabilities this deployment ships; importing this module registers each of them."""

from . import (  # noqa: F401
    channel_tools,
    clock,
    compaction,
    context,
    conversation_search,
    guardrails,
    handoffs,
    knowledge,
    memory_files,
    planning,
    run_python,
    sandbox,
    skills,
    subagents,
    system_reminders,
    thinking,
    tool_output_limits,
    tool_search,
    web_fetch,
    web_search,
)
