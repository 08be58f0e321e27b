# Before any module of ours imports a library: keep the parts of them the daemon never runs unloaded.
from gateway.ops import library_parts as _library_parts

_library_parts.skip_unused()
