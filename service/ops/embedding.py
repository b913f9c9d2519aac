"""The embedding model and the in-process embedding worker, with their lifetimes.

The model loads in the background after start-up (``/readyz`` says ``loading``
meanwhile); the worker (``MNEME_WORKER=on``) waits for it, and on shutdown finishes the
batch it is on.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
from collections.abc import AsyncIterator, Callable

import asyncpg
from aiohttp import web

from embeddings import Embedder
from embeddings.exported import ExportedEmbedder, NoExport
from embeddings.model import SentenceTransformerEmbedder
from embeddings.worker import Listen, Worker, WorkerConfig
from service.app_keys import EMBEDDER, METRICS, OUTAGE, POOL, SETTINGS, EmbedderSlot
from service.ops import db, hosts
from service.ops.jobs import cancel
from service.queries import embedding_models
from service.settings import Settings

log = logging.getLogger("mneme.app")


class ModelMismatch(RuntimeError):
    """The model loaded, but its vectors cannot be stored: loading it again cannot help."""


def load_embedder(settings: Settings) -> Embedder:
    """The model with sentence-transformers (torch) where it is installed; else, as in the
    slim image, its export in ``MNEME_ONNX_DIR`` (``embeddings.exported``)."""
    embedder: SentenceTransformerEmbedder | ExportedEmbedder
    try:
        import sentence_transformers  # noqa: F401
    except ImportError:
        embedder = _exported(settings)
    else:
        embedder = SentenceTransformerEmbedder(
            settings.embedding_model,
            device=settings.embedding_device,
            batch_size=settings.embed_batch_size,
            backend=settings.embedding_backend,
            onnx_dir=settings.model_cache_dir,
            query_int8=settings.query_int8,
        )
    if embedder.dimension != db.VECTOR_DIMENSION:
        raise ModelMismatch(
            f"{embedder.name} makes {embedder.dimension}-dimensional vectors; the schema "
            f"stores {db.VECTOR_DIMENSION}. Pick a {db.VECTOR_DIMENSION}-dimensional model"
        )
    return embedder


def _exported(settings: Settings) -> ExportedEmbedder:
    if settings.embedding_model is not None or settings.embedding_device not in ("auto", "cpu"):
        raise ModelMismatch(
            "MNEME_EMBEDDING_MODEL and MNEME_EMBEDDING_DEVICE need torch, which this install "
            "lacks (the slim image runs only its exported model, on a CPU): use the full "
            "image (--target full) or pip install the package with its dependencies"
        )
    try:
        return ExportedEmbedder(
            settings.model_cache_dir,
            settings.embed_batch_size,
            backend=settings.embedding_backend,
            query_int8=settings.query_int8,
        )
    except NoExport as exc:
        raise ModelMismatch(str(exc)) from exc


# Pauses before each further attempt to load the model. A load can fail for a passing
# reason (memory short for a moment, a file another process is making); one that still
# fails stops the process, non-zero, so that it is restarted or reported instead of
# staying up and unready.
MODEL_RETRY_S = (1.0, 2.0, 4.0)


async def load_model(slot: EmbedderSlot, settings: Settings) -> None:
    """Load the model into ``slot``, again after each of ``MODEL_RETRY_S`` if it fails;
    if it never loads, stop the process: exit status 1, after the graceful shutdown.

    The stop is a ``SystemExit`` raised from an event-loop callback, which is how
    aiohttp's own signal handler stops the server (with ``GracefulExit``, exit 0): the
    loop stops, ``serve`` (or ``web.run_app``) shuts the app down, and the interpreter
    exits with the message on stderr."""
    for attempt, pause in enumerate((*MODEL_RETRY_S, None), start=1):
        try:
            embedder = await asyncio.to_thread(load_embedder, settings)
        except Exception as exc:
            if pause is None or isinstance(exc, ModelMismatch):
                slot.state = "failed"
                log.critical(
                    "could not load the embedding model; stopping the process",
                    exc_info=True,
                    extra={"attempts": attempt},
                )
                asyncio.get_running_loop().call_soon(_stop_unloaded)
                return
            log.warning(
                "could not load the embedding model; trying again",
                exc_info=True,
                extra={"attempt": attempt, "retry_in_s": pause},
            )
            await asyncio.sleep(pause)
            continue
        slot.set(embedder)
        # What start-up made (torch, ONNX Runtime, the tokenizer: about a million
        # objects) lives as long as the process: out of the collector's sight, a full
        # collection no longer walks it in the middle of a request.
        gc.freeze()
        log.info(
            "embedding model ready",
            extra={
                "model": embedder.name,
                "backend": getattr(embedder, "backend", None),
                "queries": getattr(embedder, "query_backend", None),
                "attempts": attempt,
            },
        )
        return


async def load_and_census(app: web.Application) -> None:
    """Load the model, then say whether stored vectors were made by another one: its
    queries would be compared with them, meaningless until they are embedded again."""
    slot = app[EMBEDDER]
    await load_model(slot, app[SETTINGS])
    if slot.embedder is None:
        return
    name = slot.embedder.name
    try:
        others = await embedding_models.other_models(app[POOL], name)
    # An outage, or a database too large to count in time: the census is only advice.
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        log.info("could not count the vectors of other models", extra={"error": repr(exc)})
        return
    if others:
        log.warning(
            "memories embedded by another model: their vectors are not comparable with "
            "this model's queries until re-encoded; run `mneme reembed`",
            extra={"model": name, "memories": sum(others.values()), "others": sorted(others)},
        )


def _stop_unloaded() -> None:
    raise SystemExit("mneme: error: the embedding model could not be loaded (see the log)")


def worker_config(settings: Settings) -> WorkerConfig:
    return WorkerConfig(
        claim_size=settings.embed_claim_size,
        lease_s=settings.embed_lease_s,
        poll_s=settings.embed_poll_s,
        max_attempts=settings.embed_max_attempts,
    )


def worker_listen(settings: Settings) -> Listen:
    """Where a worker LISTENs (``Worker.listen``): on its pool, or behind a transaction
    pooler on a connection of its own to MNEME_DIRECT_DATABASE_URL (host by host, as the
    pools connect), or without that URL nowhere (it polls)."""
    if not settings.transaction_pooled:
        return True
    if settings.direct_database_url is None:
        return False
    return functools.partial(
        hosts.connect, settings.direct_database_url, timeout=db.CONNECT_TIMEOUT_S
    )


def model_lifetime(
    given: Embedder | None,
) -> Callable[[web.Application], AsyncIterator[None]]:
    """The model's part of the app's lifetime: ``given`` (tests share one), or the
    configured model loaded in the background."""

    async def model(app: web.Application) -> AsyncIterator[None]:
        slot = app[EMBEDDER]
        if given is not None:
            slot.set(given)
            yield
            return
        # In the background: the API answers (and /readyz says "loading") meanwhile.
        task = asyncio.create_task(load_and_census(app), name="mneme-model-load")
        yield
        await cancel(task)

    return model


async def embedding_worker(app: web.Application) -> AsyncIterator[None]:
    """The in-process worker (``MNEME_WORKER=on``); it waits for the model first."""
    stop = asyncio.Event()
    metrics = app[METRICS]

    async def run() -> None:
        slot = app[EMBEDDER]
        await slot.ready.wait()
        assert slot.embedder is not None
        worker = Worker(
            app[POOL],
            slot.embedder,
            worker_config(app[SETTINGS]),
            on_error=lambda exc: app[OUTAGE].note(exc, log, "worker batch failed"),
            listen=worker_listen(app[SETTINGS]),
        )
        worker.stats.observers.append(metrics.observe_batch)
        try:
            await worker.run(stop)
        finally:
            worker.close()

    task = asyncio.create_task(run(), name="mneme-embedding-worker")
    yield
    stop.set()
    if not app[EMBEDDER].ready.is_set():  # no model (still loading, or it failed)
        await cancel(task)
        return
    try:
        # Let the current batch finish and be stored; a lease covers anything cut short.
        await asyncio.wait_for(asyncio.shield(task), timeout=app[SETTINGS].shutdown_timeout)
    except TimeoutError:
        await cancel(task)
