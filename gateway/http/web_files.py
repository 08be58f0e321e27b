"""Files the web chat shows: kept in the store by the web adapter, listed and served by the API.

The web chat is a platform the gateway itself is: a chart or a shared file has to live somewhere
the page can fetch it later, so the adapter keeps each file's bytes as adapter state (one row per
file, under an unguessable id, keyed under the conversation so that deleting it erases them) and an
index of the conversation's shares (one row per conversation). The API lists the index with the conversation's messages and serves a file at
`FILE_ROUTE` under the API's own auth (the page fetches it with its token, never in a URL).
Only the four image types a browser shows safely and two audio types it plays (OGG, MP3: spoken answers)
are served inline; everything else (SVG and HTML included) is a download, with `nosniff`.
"""

from __future__ import annotations

import base64
import json
from dataclasses import asdict, dataclass, field
from typing import Any

FILE_ROUTE = "/api/v1/conversations/{id}/files/{file_id}"
INLINE = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "audio/ogg", "audio/mpeg"})


@dataclass(frozen=True, slots=True)
class StoredFile:
    conversation_id: str
    name: str
    media_type: str
    data: bytes

    def to_state(self) -> str:
        return json.dumps({"conversation_id": self.conversation_id, "name": self.name, "media_type": self.media_type,
                           "data": base64.b64encode(self.data).decode()})

    @classmethod
    def from_state(cls, value: str) -> StoredFile:
        raw = json.loads(value)
        return cls(raw["conversation_id"], raw["name"], raw["media_type"], base64.b64decode(raw["data"]))


@dataclass(frozen=True, slots=True)
class Share:
    """One message of files in the conversation's listing."""

    id: str
    time: str
    caption: str
    files: list[dict[str, str]] = field(default_factory=list)  # id, name, media_type, url

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def file_key(conversation_id: str, file_id: str) -> str:
    """Under the conversation (`<what>:<conversation id>:…`), so deleting it erases its files too."""
    return f"file:{conversation_id}:{file_id}"


def index_key(conversation_id: str) -> str:
    return f"files:{conversation_id}"  # the shares listed, in order


def file_url(conversation_id: str, file_id: str) -> str:
    return FILE_ROUTE.replace("{id}", conversation_id).replace("{file_id}", file_id)


def shares(index: str | None) -> list[dict[str, Any]]:
    return list(json.loads(index)) if index else []
