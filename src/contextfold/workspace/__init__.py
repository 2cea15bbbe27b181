"""Offload stores: where content that leaves the context is kept, and read back."""

from ._protocol import DataOffloader, Offloader

__all__ = ["DataOffloader", "Offloader"]
