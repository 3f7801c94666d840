"""Errors that reach a user as one line naming the place at fault."""

from __future__ import annotations


class InputError(Exception):
    """Bad input from outside (a file, an argument, a message): ``place: what is wrong``.

    ``place`` is what a person needs to find the problem: ``cluster.yaml:12``, ``--gpus``,
    ``capture.jsonl.gz:5031``. The CLI prints ``str(error)`` and exits with status 2.
    """

    def __init__(self, place: str, message: str) -> None:
        super().__init__(f"{place}: {message}")
        self.place = place
        self.message = message


class InputErrors(InputError):
    """Several independent problems found in one input, reported one per line."""

    def __init__(self, errors: list[InputError]) -> None:
        self.errors = errors
        super().__init__(errors[0].place, errors[0].message)

    def __str__(self) -> str:
        return "\n".join(str(e) for e in self.errors)
