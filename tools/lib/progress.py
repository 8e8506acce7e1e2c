"""Progress of a long run on stderr, shaped for where stderr goes: on a terminal one line
rewritten in place (a carriage return before each update), into a log or a pipe whole lines,
one per `lines`-th of the run and one at the end, so that a log reads line by line. Each line
says how long the rest should take, from the mean of the steps so far (eta()).

Every tool that counts its way through a known number of steps reports through Counter; a tool
that prints one line per event (ab.py's Progress, main_job.py's log) needs nothing from here.
"""
import sys
import time


def eta(start, done, total):
    """', about N s to go' once `done` of `total` steps took since `start` (time.time()), from
    their mean; '' before the first step and after the last."""
    if done <= 0 or done >= total:
        return ""
    left = (time.time() - start) / done * (total - done)
    return f", about {left / 60:.0f} min to go" if left >= 120 else f", about {left:.0f} s to go"


class Counter:
    """Counter("[count_pairs]", 120, "callgrind runs"); .step() after each run; .close()."""

    def __init__(self, tag, total, unit, lines=10, file=None):
        self.tag, self.total, self.unit = tag, total, unit
        self.file = file or sys.stderr
        self.on_terminal = self.file.isatty()
        self.every = max(1, total // lines)
        self.done = 0
        self.start = time.time()

    def step(self):
        self.done += 1
        if not (self.on_terminal or self.done % self.every == 0 or self.done == self.total):
            return
        lead, end = ("\r", "") if self.on_terminal else ("", "\n")
        print(f"{lead}{self.tag} {self.done}/{self.total} {self.unit}, "
              f"{time.time() - self.start:.0f} s{eta(self.start, self.done, self.total)}",
              end=end, file=self.file, flush=True)

    def close(self):
        """Ends the rewritten line on a terminal (a log's lines are already whole)."""
        if self.on_terminal and self.done:
            print(file=self.file, flush=True)
