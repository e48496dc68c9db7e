"""structlog configuration. Only CLI entry points call :func:`configure_logging`."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog


def configure_logging(*, level: str = "info", stream: TextIO | None = None) -> None:
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
        logger_factory=structlog.PrintLoggerFactory(file=output),
        cache_logger_on_first_use=False,
    )
