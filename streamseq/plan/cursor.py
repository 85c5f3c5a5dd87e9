"""Where a run stands: one immutable :class:`Cursor` and its pure transitions.

A loader keeps one cursor; a pass starts from it (:meth:`Cursor.pass_opened`) and
reports the transitions it makes (:meth:`Cursor.delivered`, :meth:`Cursor.ended`);
:meth:`Cursor.set_epoch`, :meth:`Cursor.from_state` and :meth:`Cursor.to_state` are
the trainer's and the checkpoint's. Every transition returns a new cursor.

The epoch-end rule is written once, in :meth:`Cursor.moved_on`: a pass that ended, or
that was left after it delivered a batch, hands the next pass the next epoch (or the
epoch :meth:`Cursor.set_epoch` chose meanwhile), unless an epoch set by
``set_epoch`` holds; a state saved at the end of its epoch loads at the start of the
next one (:meth:`Cursor.from_state`).

Example:
    >>> c = Cursor().pass_opened().delivered().delivered()
    >>> c.epoch, c.next, c.started
    (0, 2, True)
    >>> c.ended().moved_on()
    Cursor(epoch=1)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class Cursor:
    """Where a run stands: the epoch, the next batch of its plan, and how it got there.

    Attributes:
        epoch: the epoch of the pass in progress or of the last one (or the one loaded).
        next: the next batch of that epoch's plan.
        pending: loaded from a state, not used yet: the next pass starts at ``next``
            (the first batch delivered, or the end, uses it up).
        started: a pass delivered a batch from here.
        at_end: a pass delivered the epoch's last batch and reached its end.
        epoch_set: the epoch was set by :meth:`set_epoch`: every pass reads it until
            ``set_epoch`` is called again.
        deferred: an epoch :meth:`set_epoch` chose while a pass ran: that of the next
            pass (None: none).

    Example:
        >>> Cursor.from_state(0, 2, length=5)
        Cursor(epoch=0, next=2, pending=True)
    """

    epoch: int = 0
    next: int = 0
    pending: bool = False
    started: bool = False
    at_end: bool = False
    epoch_set: bool = False
    deferred: int | None = None

    def __repr__(self) -> str:
        """The epoch, and the other fields that are not their defaults."""
        shown = [f"epoch={self.epoch}"]
        for f in dataclasses.fields(self)[1:]:
            value = getattr(self, f.name)
            if value != f.default:
                shown.append(f"{f.name}={value!r}")
        return f"Cursor({', '.join(shown)})"

    def delivered(self) -> Cursor:
        """A pass delivered batch ``next``: the next one is ``next + 1``.

        Example:
            >>> Cursor(0, 3, pending=True).delivered()
            Cursor(epoch=0, next=4, started=True)
        """
        return Cursor(  # (every field named: a third of what dataclasses.replace costs)
            epoch=self.epoch,
            next=self.next + 1,
            pending=False,
            started=True,
            at_end=self.at_end,
            epoch_set=self.epoch_set,
            deferred=self.deferred,
        )

    def ended(self) -> Cursor:
        """A pass reached the end of the epoch (a loaded position is used up).

        Example:
            >>> Cursor(0, 3, started=True).ended().at_end
            True
        """
        return dataclasses.replace(self, pending=False, at_end=True)

    def moved_on(self) -> Cursor:
        """Where the next pass starts, as far as the epoch goes: THE epoch-end rule.

        A pass that ended, or that was left after it delivered a batch, moves the run
        to the next epoch, unless :meth:`set_epoch` chose the epoch: then it stays, or
        moves to the epoch set during the pass (``deferred``). Otherwise the cursor
        is where it was (a loaded position not used yet, or batch 0).

        Example:
            >>> Cursor(2, 5, started=True).moved_on().epoch
            3
            >>> Cursor(2, 5, started=True, epoch_set=True).moved_on().epoch
            2
            >>> Cursor(2, 5, started=True, epoch_set=True, deferred=7).moved_on().epoch
            7
            >>> Cursor(2, 5, pending=True).moved_on().next
            5
        """
        if self.deferred is not None:
            return Cursor(self.deferred, epoch_set=True)
        if (self.started or self.at_end) and not self.epoch_set:
            return Cursor(self.epoch + 1)
        return self

    def settled(self) -> Cursor:
        """The cursor once a pass that reached its end is taken in (otherwise itself).

        What :meth:`to_state` saves and the plan the loader shows: past the end of a
        pass, the start of the next epoch; a pass left early still stands in its epoch
        (a checkpoint taken there resumes it).

        Example:
            >>> Cursor(0, 3, started=True).settled().epoch
            0
            >>> Cursor(0, 3, started=True, at_end=True).settled().epoch
            1
        """
        return self.moved_on() if self.at_end else self

    @property
    def upcoming(self) -> int:
        """The epoch the next pass reads.

        Example:
            >>> Cursor(0, 1, started=True).upcoming
            1
        """
        return self.moved_on().epoch

    def pass_opened(self) -> Cursor:
        """Where a new pass starts: the loaded position, else batch 0 of :attr:`upcoming`.

        Example:
            >>> Cursor(0, 2, pending=True).pass_opened().next
            2
            >>> Cursor(0, 2, started=True).pass_opened()
            Cursor(epoch=1)
        """
        c = self.moved_on()
        start = c.next if c.pending else 0
        return dataclasses.replace(c, next=start, started=False, at_end=False)

    def set_epoch(self, epoch: int, *, running: bool) -> Cursor:
        """The trainer selects ``epoch`` (``running``: a pass is in progress).

        A pass in progress goes on with its own epoch; the next one reads ``epoch``
        (``deferred``). A loaded position not used yet survives the setting of its own
        epoch. Otherwise the next pass starts at batch 0 of ``epoch``. From then on,
        every pass reads the epoch set (``epoch_set``).

        Example:
            >>> c = Cursor(0, 2, started=True).set_epoch(4, running=True)
            >>> c.epoch, c.deferred, c.upcoming
            (0, 4, 4)
            >>> Cursor(3, 2, pending=True).set_epoch(3, running=False).next
            2
            >>> Cursor(3, 2, pending=True).set_epoch(5, running=False).next
            0
        """
        if running:
            deferred = None if epoch == self.epoch else epoch
            return dataclasses.replace(self, epoch_set=True, deferred=deferred)
        now = self.settled()
        if now.pending and epoch == now.upcoming:
            return dataclasses.replace(now, epoch_set=True)
        return Cursor(epoch, epoch_set=True)

    @classmethod
    def from_state(cls, epoch: int, next_batch: int, length: int) -> Cursor:
        """The cursor of a state at ``next_batch`` of its epoch's ``length`` batches.

        A state saved after the last batch of its epoch (as a trainer checkpoints after
        its last step) stands at the start of the next epoch. An epoch of no batches
        (the empty rest of an epoch resumed on other rows, saved in the padding that
        ends it) is not over before a pass reads it: the cursor stands in it.

        Example:
            >>> Cursor.from_state(2, 5, length=5)
            Cursor(epoch=3, pending=True)
            >>> Cursor.from_state(2, 0, length=0)
            Cursor(epoch=2, pending=True)
        """
        if length and next_batch >= length:
            return cls(epoch + 1, 0, pending=True)
        return cls(epoch, next_batch, pending=True)

    def to_state(self) -> tuple[int, int]:
        """The epoch and next batch a state saves (past the end of a pass: the next epoch's).

        Example:
            >>> Cursor(0, 3, started=True).to_state()
            (0, 3)
            >>> Cursor(0, 3, started=True, at_end=True).to_state()
            (1, 0)
        """
        now = self.settled()
        return now.epoch, now.next
