"""The capabilities this deployment ships; importing this module registers each of them."""

from . import channel_tools, clock, memory_files, thinking  # noqa: F401
from . import web_fetch, web_search  # noqa: F401
from . import run_python, sandbox, skills  # noqa: F401
from . import context, conversation_search, knowledge, planning  # noqa: F401
