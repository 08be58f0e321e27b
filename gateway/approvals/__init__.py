"""Approvals: the service (decisions, deciders, modes, cards) and the pure policy; the gate is a capability."""
