"""The kernel builder's checks of its inputs (kernel_build.py): every bad argument or input file
ends the run in one line that names it and says what is wrong, never a Python traceback.

  OneLineParser          argparse whose errors are one line ("prog: --out x: ..."), without
                         the usage text (--help prints that), exit status 2
  output_dir(path)       creates the output folder, or says why it cannot be
  input_file(path, what) a file that can be read, or why not
  read_text(path, what)  a text file's contents (UTF-8), or why not

The last three raise InputError, whose message is the one line. The A/B scripts above
(tools/lib/cli_args.py) check their inputs with these same functions.
"""
import argparse
import os


class InputError(Exception):
    """An input the run cannot use; the message is one line naming it."""


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: {message} (--help for usage)\n")


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
