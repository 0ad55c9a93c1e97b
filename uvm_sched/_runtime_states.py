"""The Scheduler's states, and the error for a transition its table does not hold.

Rule: ``Scheduler.state`` changes in one place, ``Scheduler._enter(new)``, which runs the
actions its transition table lists for (state, new) in order, and refuses a pair the
table does not hold. Why: with the state a string compared here and there and each
transition's work spread over the methods that happen to cause it, a transition that
forgot half its work (a prediction left out of ``stats()``, a hook left installed) was
invisible; one table shows every transition with all it does.
"""
from __future__ import annotations

import enum

from ._errors import Error


class State(str, enum.Enum):
    """State of a ``Scheduler`` (a ``str``: ``scheduler.state == "armed"`` holds)::

                   start()
          IDLE ──────────────► RECORDING ◄──┐ a fresh recording: learning failed after
           │                    │ │  │  ▲   └─┘ the warm-up, or the ring dropped events
           │                    │ │  │  │
           │                    │ │  │  │ relearn_after steps in a row diverged
           │                    │ │  ▼  │ (a known other kind is no divergence)
           │                    │ │ ARMED ─────────────────► UNPLANNED
           │                    │ │  │  │ the watchdog: the       │
           │                    │ │  │  │ plan is slower than     │
           │                    │ │  │  │ no plan                 │
           │                    │ │  │  ▼ relearn_limit spent     │
           │                    │ └──┼─► WATCHING               │
           │ close()    close() │    │ close()  │ close()         │ close()
           ▼                    ▼    ▼          ▼                 ▼
          CLOSED ◄──────────────┴────┴──────────┴─────────────────┘
          (final)

    Transitions (``Scheduler._TRANSITIONS`` holds each one's actions):

    - idle -> recording: ``start()``
    - idle -> closed: ``close()`` before ``start()``
    - recording -> recording: a fresh recording (learning failed after a full warm-up;
      events were lost to a full ring)
    - recording -> armed: the background worker's plan is armed at a ``poll()``
    - recording -> closed: ``close()`` (a plan still being made is never armed)
    - armed -> recording: ``relearn_after`` steps in a row diverged: relearn
    - armed -> unplanned: the watchdog measured the plan slower than no plan
    - armed -> closed: ``close()`` disarms the plan
    - unplanned -> closed: ``close()``
    - armed -> watching: steps keep diverging and ``relearn_limit`` relearns are spent
    - recording -> watching: learning failed again with ``relearn_limit`` spent
    - watching -> closed: ``close()``

    While ``recording``, once the warm-up is recorded a plan is made in the background
    (``stats()["planning"]``) and the loop runs on unplanned. While ``armed``, the tuner
    first arms each candidate plan in turn (``stats()["tuning_now"]``), then the watchdog
    times the plan against no plan (``stats()["watchdog"]["phase"]``: plan, none,
    watch): these are phases of ``armed``, not states, because what the Scheduler does
    with the events (count divergences, relearn when they persist) and what it reports
    (the plan it holds) are the same in each.
    """

    IDLE = "idle"
    RECORDING = "recording"
    ARMED = "armed"
    UNPLANNED = "unplanned"
    WATCHING = "watching"
    CLOSED = "closed"

    def __str__(self) -> str:  # "armed", not "State.ARMED", in messages and f-strings
        return self.value


class StateError(Error, RuntimeError):
    """A transition the Scheduler's table does not hold: a bug in uvm_sched, not in the
    program that uses it."""
