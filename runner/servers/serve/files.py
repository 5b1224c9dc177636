"""The file routes' workspace access: runner/untrusted/wsfiles.py (a local Runner's too)."""
from ...untrusted.wsfiles import NAME_MAX, TooLarge, names, open_read, parts, write

__all__ = ["NAME_MAX", "TooLarge", "names", "open_read", "parts", "write"]
