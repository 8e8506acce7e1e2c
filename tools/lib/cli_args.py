"""The command lines of the A/B scripts (ab.py, kernel_ab.py, kernel_build.py): every bad
argument ends the run in one line that names it and says what is wrong, with exit status 2,
before anything is built; never a Python traceback.

  OneLineParser          argparse whose errors are one line ("prog: --sizes abc: ..."), without
                         the usage text (--help prints that)
  positive_int, positive_float
                         argparse types: a number above zero
  size_list(sizes)       an argparse type: a comma-separated subset of `sizes`
  output_dir(path)       creates the output folder, or says why it cannot be
  input_file(path, what) a file that can be read, or why not
  read_text(path, what)  a text file's contents (UTF-8), or why not

The last three raise InputError, whose message is the one line; the scripts turn it into their
own error line.
"""
import argparse
import os


class InputError(Exception):
    """An input the run cannot use; the message is one line naming it."""


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: {message} (--help for usage)\n")


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


def output_dir(path, what="--out"):
    """Creates the folder `path` (and its parents) if it is not there; its absolute path."""
    path = os.path.abspath(path)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise InputError(f"{what} {path}: cannot create the folder: {e.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise InputError(f"{what} {path}: the folder is not writable")
    return path


def input_file(path, what):
    """`path` if it is a file this process can read."""
    if not os.path.lexists(path):
        raise InputError(f"{what} {path}: no such file")
    if os.path.isdir(path):
        raise InputError(f"{what} {path}: is a folder, not a file")
    if not os.path.isfile(path):
        raise InputError(f"{what} {path}: not a regular file (a broken link or a device)")
    if not os.access(path, os.R_OK):
        raise InputError(f"{what} {path}: not readable")
    return path


def read_text(path, what):
    """The contents of the text file `path` (UTF-8)."""
    input_file(path, what)
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except UnicodeDecodeError as e:
        raise InputError(f"{what} {path}: not UTF-8 text (byte {e.start}: "
                         f"{e.object[e.start:e.start + 1]!r})") from None
    except OSError as e:
        raise InputError(f"{what} {path}: cannot be read: {e.strerror}") from None
