"""Captures (recorded bus traffic) and replay of the whole pipeline over them on a virtual clock."""
