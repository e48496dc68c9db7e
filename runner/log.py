"""structlog configuration. Only CLI entry points call :func:`configure_logging`."""

from __future__ import annotations

import logging
import sys
from typing import Final, TextIO

import structlog


class _CurrentStderrLogger:
    """Writes to whatever ``sys.stderr`` is at the time of the call, not at configuration
    time: a long-lived process (or a test run) may replace stderr after logging is set up."""

    def msg(self, message: str) -> None:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()

    log = debug = info = warning = warn = error = err = critical = fatal = exception = msg


def _current_stderr_logger(*_args: object) -> _CurrentStderrLogger:
    return _CurrentStderrLogger()


#: The level of the events on stderr unless ``--log-level`` says otherwise.
DEFAULT_LOG_LEVEL: Final = "info"


def configure_logging(*, level: str = DEFAULT_LOG_LEVEL, stream: TextIO | None = None) -> None:
    """JSON lines on stderr when it is not a terminal, a readable console otherwise."""
    output = stream if stream is not None else sys.stderr
    renderer: structlog.typing.Processor
    if output.isatty():
        renderer = structlog.dev.ConsoleRenderer()
    else:
        renderer = structlog.processors.JSONRenderer(sort_keys=True)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=(
            structlog.PrintLoggerFactory(file=stream)
            if stream is not None
            else _current_stderr_logger
        ),
        cache_logger_on_first_use=False,
    )
