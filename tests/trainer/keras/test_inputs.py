"""What a run's model reads, made once (trainer/keras/inputs.py): the walk of `Inputs.of`."""

from __future__ import annotations

import sys
from collections.abc import Callable

from trainer.dataset.manifest import load_manifest
from trainer.keras.inputs import Inputs


def walk(call: Callable[[], object]) -> list[str]:
    """The rooms (trainer modules) that `call` stays in, in order, as a reader of its code follows
    it: a call into another module's function or method is a stay there, and the return to the
    caller's module another stay; a module's calls to its own functions and its helpers (nested
    functions, comprehensions, dunders) belong to its stay. One level deep: the rooms the first
    function's module calls into, not the rooms they call into in turn."""
    stack: list[tuple[str | None, int]] = []  # per frame: (its room, modules crossed to reach it)
    rooms: list[str] = []

    def profile(frame, event, arg):
        if event == "return" and stack:
            stack.pop()
        elif event == "call":
            module = frame.f_globals.get("__name__", "")
            code = frame.f_code
            room = next((r for r, _ in reversed(stack) if r), None)
            crossed = (stack[-1][1] if stack else 0) + (room is not None and module != room)
            counted = (
                module.startswith("trainer.")
                and not code.co_name.startswith(("<", "__"))
                and "<locals>" not in code.co_qualname
                and crossed <= 1
            )
            stack.append((module if counted else None, crossed))
        else:
            return
        here = next((r for r, _ in reversed(stack) if r), None)
        if here and (not rooms or rooms[-1] != here):
            rooms.append(here)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return rooms


def test_inputs_of_walks_the_recipe_in_one_pass(dataset):
    manifest = load_manifest(str(dataset.root))

    rooms = walk(lambda: Inputs.of(manifest))

    returns = sum(room in rooms[:at] for at, room in enumerate(rooms))
    assert len(rooms) <= 25 and returns <= 16, " > ".join(rooms)
    # the train split's view is read once and the recipe made in one pass, moments inside: the
    # facts, the label's classes and the moments are the recipe's rooms, not stays of this walk
    assert [r for r in rooms if r.startswith("trainer.recipe.")] == ["trainer.recipe.rules"] * 2
    assert rooms[0] == rooms[-1] == "trainer.keras.inputs"
