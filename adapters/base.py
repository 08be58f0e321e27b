"""What every platform adapter shares.

The protocol lives in `gateway.surface`, the registry in `gateway.adapter_registry` and the
reconnect helpers in `gateway.reconnect` (the core owns the interface it talks to).
"""

from __future__ import annotations
