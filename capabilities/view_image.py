"""view_image: look again at an image someone shared earlier in this conversation.

An attachment reaches the model once, on the turn it was shared (history is rebuilt from text), so
"what was on that screenshot?" three turns later needs the picture again. The bytes are fetched
again from the platform with the bot's own credentials (the adapter's `fetch_attachment`, the same
fetch and cap as on the turn it was shared) and handed to the model for this call; they are never
written to the gateway's store (what a parked run or a snapshot keeps goes through
`attachments.without_contents`). Only the four types a model can look at are opened: PNG, JPEG,
GIF and WebP; anything else is refused by name, so the model never describes a file it did not see.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import BinaryContent
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import FunctionToolset

from gateway.runs.turn import Turn

from .failures import trouble
from .registry import BuildContext, CapabilityDecl, ToolDecl, register, simple
from .shared_files import fetch_again, find, media_type, shared_earlier

VIEWABLE = ("image/png", "image/jpeg", "image/gif", "image/webp")
MAX_IMAGES = 4


def _toolset() -> FunctionToolset[Turn]:
    async def view_image(ctx: RunContext[Turn], names: list[str]) -> list[str | BinaryContent] | str:
        """Look again at images someone shared earlier in this conversation, by their file names.

        Use it when a question is about a picture shared on an earlier turn (you saw it only on the turn
        it was shared). Give the names as the conversation shows them ("[Files shared with this message:
        screenshot.png ...]"). Only PNG, JPEG, GIF and WebP images can be opened; for a document, ask the
        person to share it again.

        Args:
            names: One to four file names, e.g. ["screenshot.png"]. The newest file of that name is opened.

        Returns:
            A line per image naming it, then the images themselves. A name not shared here, or a file
            that is not one of the four image types, is refused by name; nothing is opened then.
        """
        turn = ctx.deps
        if not 1 <= len(names) <= MAX_IMAGES:
            return trouble(ctx, "mistake", f"give one to {MAX_IMAGES} file names")
        if turn.fetch_attachment is None:
            return "Images cannot be fetched again on this platform: ask the person to share it again."
        files = await shared_earlier(turn)
        chosen = []
        for name in names:
            entry = find(ctx, files, name)
            if isinstance(entry, str):
                return entry
            mime = media_type(entry)
            if mime not in VIEWABLE:
                return (f"Not opened: {name} is {mime or 'of an unknown type'}; only PNG, JPEG, GIF and WebP "
                        "images can be looked at.")
            chosen.append((name, mime, entry))
        out: list[str | BinaryContent] = []
        for name, mime, entry in chosen:
            data = await fetch_again(ctx, entry, "Not opened")
            if isinstance(data, str):
                return data
            out += [f"{name} ({mime}, {len(data)} bytes):", BinaryContent(data, media_type=mime, identifier=name)]
        return out

    return FunctionToolset([view_image])


def build(ctx: BuildContext) -> AbstractCapability[Any]:
    return simple(toolsets=[_toolset()])


register(CapabilityDecl(
    id="view_image", name="Looking at an image", category="analysis", tools=(ToolDecl("view_image"),), build=build,
    shared=True,  # its tool reads the run (the conversation's files, the fetcher) from its deps
    description="Looks again at an image shared earlier in the conversation, fetched anew from the platform.",
))
