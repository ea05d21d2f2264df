"""Serving side shared by the built-in targets (the emulator and the fixed-schedule mock)."""
