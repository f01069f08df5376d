"""User errors: problems with what the user gave (a file, an option), reported by the command line as one line.

Code that finds such a problem raises `UserInputError` with a message that names the file or the argument and
says what was expected: `<file>: dataset 'CNN_high_0/W_carry' is missing (expected shape (124, 124))`. Every
command-line entry point runs inside `reported_as_one_line`, which prints `error: <message>` to stderr and exits
with status 2. Any other exception is a bug and keeps its traceback; `--debug` (or ELMO_HF_DEBUG=1 for the example
scripts, whose Trainer arguments already own `--debug`) keeps the traceback for user errors too.
"""

import contextlib
import os
import sys

USER_ERROR_EXIT_STATUS = 2  # argparse's status for a bad command line


class UserInputError(ValueError):
    """A bad or missing input file, a contradictory option or a bad argument: the user can fix it.

    A `ValueError`, so callers of the Python API catch it as before."""


def add_debug_argument(parser):
    parser.add_argument(
        "--debug", action="store_true", help="show the full traceback of an input error, not only its one-line message"
    )


@contextlib.contextmanager
def reported_as_one_line(debug=False):
    """Turn a `UserInputError` raised inside into `error: <message>` on stderr and exit status 2, unless `debug`
    or the environment variable ELMO_HF_DEBUG is set."""
    try:
        yield
    except UserInputError as error:
        if debug or os.environ.get("ELMO_HF_DEBUG"):
            raise
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(USER_ERROR_EXIT_STATUS) from None


def unreadable_file_error(path, error, expected):
    """The `UserInputError` for a file that cannot be opened or decoded (`error`: an OSError or UnicodeDecodeError),
    saying what the file should have been (`expected`)."""
    reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    return UserInputError(f"{path}: cannot be read ({reason}); expected {expected}")


def unloadable_model_error(model, error):
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
