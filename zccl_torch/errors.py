"""Exceptions raised by zccl-torch."""

from zccl_torch._native import _C

#: Raised when a compressed stream is truncated, corrupted or otherwise malformed.
#: A subclass of :class:`ValueError`, created by the C++ extension so that the C++ decoder's
#: ``StreamError`` arrives in Python as this type.
CorruptStreamError = _C.CorruptStreamError

__all__ = ["CorruptStreamError"]
