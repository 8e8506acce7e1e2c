"""The command lines of the A/B scripts (ab.py, kernel_ab.py, kernel_sizes.py): every bad
argument ends the run in one line that names it and says what is wrong, with exit status 2,
before anything is built; never a Python traceback.

  positive_int, positive_float
                         argparse types: a number above zero
  size_list(sizes)       an argparse type: a comma-separated subset of `sizes`

and, from the kernel builder below the scripts (kernel/build_inputs.py), OneLineParser,
output_dir, input_file, read_text and their InputError, whose message is the one line; the
scripts turn it into their own error line.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "kernel"))
from build_inputs import InputError, OneLineParser, input_file, output_dir, read_text  # noqa: E402,F401


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number above 0")
    return value


def size_list(sizes):
    """An argparse type: comma-separated object sizes, each one of `sizes` (the benchmarks'
    sizes: a pair is timed only at those), without repeats."""
    allowed = ",".join(map(str, sizes))

    def parse(text):
        items = text.split(",")
        if not text or any(not s.strip() for s in items):
            raise argparse.ArgumentTypeError(f"{text!r}: an empty size; expected sizes from "
                                             f"{allowed}, comma-separated")
        values = []
        for s in items:
            try:
                values.append(int(s))
            except ValueError:
                raise argparse.ArgumentTypeError(f"{text!r}: {s!r} is not an integer") from None
        bad = [v for v in values if v not in sizes]
        if bad:
            raise argparse.ArgumentTypeError(f"{text!r}: {bad[0]} is not one of the pair "
                                             f"benchmarks' sizes ({allowed})")
        if len(set(values)) != len(values):
            raise argparse.ArgumentTypeError(f"{text!r}: a size given twice")
        return values
    return parse
