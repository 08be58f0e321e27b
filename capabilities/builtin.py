"""The capabilities this deployment ships; importing this module registers each of them."""

from . import clock, thinking  # noqa: F401
