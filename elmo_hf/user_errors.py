"""User errors: problems with what the user gave (a file, an option), reported by the command line as one line.

Code that finds such a problem raises `UserInputError` with a message that names the file or the argument and
says what was expected: `<file>: dataset 'CNN_high_0/W_carry' is missing (expected shape (124, 124))`. Every
command-line entry point runs inside `reported_as_one_line`, which prints `error: <message>` to stderr and exits
with status 2. Any other exception is a bug and keeps its traceback; `--debug` (or ELMO_HF_DEBUG=1 for the example
scripts, whose Trainer arguments already own `--debug`) keeps the traceback for user errors too.

The output side is the user's too: a full disk, a quota, a read-only or missing folder or a permission denial while
a command writes is `unwritable_output_error`'s one line, and an interrupt (Ctrl-C, SIGTERM) is `interrupted`'s.
"""

import argparse
import contextlib
import errno
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType

USER_ERROR_EXIT_STATUS = 2  # argparse's status for a bad command line


class UserInputError(ValueError):
    """A bad or missing input file, a contradictory option or a bad argument: the user can fix it.

    A `ValueError`, so callers of the Python API catch it as before."""


def add_debug_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--debug", action="store_true", help="show the full traceback of an input error, not only its one-line message"
    )


class UnwritableOutputError(OSError):
    """An output that could not be written (a full disk, a quota, a read-only or missing folder, a permission
    denial): the `OSError` raised, as an `OSError` with its errno and reason, for the output the user named (`path`),
    with the bytes it needs where known (`needed`, an estimate) and what was kept for a rerun (`kept`, a sentence)."""

    def __init__(
        self, path: str | os.PathLike[str], error: OSError, needed: int | None = None, kept: str | None = None
    ) -> None:
        super().__init__(error.errno, error.strerror or str(error), str(path))
        self.path, self.needed, self.kept = str(path), needed, kept


@contextlib.contextmanager
def reported_as_one_line(debug: bool = False) -> Iterator[None]:
    """Turn a `UserInputError` or an `UnwritableOutputError` raised inside into `error: <message>` on stderr and
    exit status 2, unless `debug` or the environment variable ELMO_HF_DEBUG is set."""
    try:
        yield
    except (UserInputError, UnwritableOutputError) as error:
        if debug or os.environ.get("ELMO_HF_DEBUG"):
            raise
        if isinstance(error, UnwritableOutputError):
            error = unwritable_output_error(error.path, error, error.needed, error.kept)
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(USER_ERROR_EXIT_STATUS) from None


# What happened and what to do, by errno, for an output that cannot be written.
_WRITE_FAULTS: dict[int | None, tuple[str, str]] = {
    errno.ENOSPC: ("no space left on the device", "make room or choose another folder"),
    errno.EDQUOT: ("the disk quota is exceeded", "make room or choose another folder"),
    errno.EROFS: ("the file system is read-only", "choose a folder you can write to"),
    errno.EACCES: ("permission denied", "choose a folder you can write to, or change its permissions"),
    errno.EPERM: ("permission denied", "choose a folder you can write to, or change its permissions"),
    errno.ENOENT: ("its folder does not exist", "create it or choose another one"),
    errno.ENOTDIR: ("a part of its path is a file, not a folder", "choose another path"),
}


def unwritable_output_error(
    path: str | os.PathLike[str], error: OSError, needed: int | None = None, kept: str | None = None
) -> UserInputError:
    """The `UserInputError` for an output `path` that could not be written (`error`: the OSError raised): what
    happened and what to do; for a full disk, `needed` (bytes, an estimate where known) beside the free space; `kept`
    says what was kept for a rerun (e.g. the chunks that --resume continues from)."""
    what, todo = _WRITE_FAULTS.get(error.errno, (error.strerror or str(error), "check the folder"))
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        sizes = [f"about {_size(needed)} needed"] if needed else []
        with contextlib.suppress(OSError):
            sizes.append(f"{_size(shutil.disk_usage(_existing_folder(path)).free)} free")
        what += f" ({', '.join(sizes)})" if sizes else ""
    return UserInputError(f"{path}: cannot be written: {what}; {todo}" + (f"; {kept}" if kept else ""))


def _existing_folder(path: str | os.PathLike[str]) -> str:
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    return folder


def _size(count: float) -> str:
    for unit in ("bytes", "KB", "MB"):
        if count < 1000:
            return f"{count:.0f} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1000
    return f"{count:.1f} GB"


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) or SIGTERM; `signal_number` says which."""

    def __init__(self, signal_number: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signal_number).name)
        self.signal_number = signal_number


@contextlib.contextmanager
def interrupts_reported(how_to_continue: Callable[[], str | None], debug: bool = False) -> Iterator[None]:
    """Turn Ctrl-C and SIGTERM inside into one line on stderr, `interrupted (SIGINT); <how_to_continue>` (a callable
    giving the sentence, or None), and the exit status 128 + the signal's number, as a shell reports a signal."""

    def on_terminate(signal_number: int, frame: FrameType | None) -> None:
        raise Interrupted(signal_number)

    in_main_thread = threading.current_thread() is threading.main_thread()  # only it may set a signal handler
    previous = signal.signal(signal.SIGTERM, on_terminate) if in_main_thread else None
    try:
        yield
    except KeyboardInterrupt as interrupt:
        if debug or os.environ.get("ELMO_HF_DEBUG"):
            raise
        signal_number = getattr(interrupt, "signal_number", signal.SIGINT)
        advice = how_to_continue()
        print(
            f"interrupted ({signal.Signals(signal_number).name})" + (f"; {advice}" if advice else ""), file=sys.stderr
        )
        raise SystemExit(128 + signal_number) from None
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)


def unreadable_file_error(path: str | os.PathLike[str], error: Exception, expected: str) -> UserInputError:
    """The `UserInputError` for a file that cannot be opened or decoded (`error`: an OSError or UnicodeDecodeError),
    saying what the file should have been (`expected`)."""
    reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    return UserInputError(f"{path}: cannot be read ({reason}); expected {expected}")


def unloadable_model_error(model: str | os.PathLike[str], error: Exception) -> UserInputError:
    """The `UserInputError` for a model folder or Hub name that `from_pretrained` could not load. `error` is what it
    raised: an OSError (no such folder or model, unreadable files; the first line of its explanation is kept) or a
    ValueError (files that contradict each other or hold bad values; its message names the file or field)."""
    message = str(error).strip()
    if isinstance(error, ValueError):
        return UserInputError(message if message.startswith(str(model)) else f"{model}: {message}")
    reason = message.splitlines()[0] if message else type(error).__name__
    if not os.path.exists(model):
        return UserInputError(f"{model}: no such folder, and no such model on the Hub ({reason})")
    return UserInputError(f"{model}: cannot load the model ({reason})")
