"""What an MCP tool's result becomes for the model, by the rule files shared in the chat follow
(`gateway/inbound/attachments.kind`): images and PDFs pass as the model's input, text-like files
are read as text, and anything else (an archive, an executable) becomes a note naming its type and
size. A provider would otherwise get a raw file part it may refuse, failing the run.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic_ai.messages import BinaryContent, ToolReturn

from gateway.inbound.attachments import kind, text_part


def for_the_model(value: Any) -> Any:
    if isinstance(value, ToolReturn):
        return dataclasses.replace(value, return_value=for_the_model(value.return_value))
    if isinstance(value, list):
        return [for_the_model(v) for v in value]
    if not isinstance(value, BinaryContent):
        return value
    what = kind("", value.media_type)
    if what in ("image", "pdf"):
        return value
    if what == "text":
        return text_part("result", value.media_type, value.data)
    return (f"[The tool returned a file of type {value.media_type} ({len(value.data):,} bytes); files of this type "
            "are not read, so its contents are not shown.]")
