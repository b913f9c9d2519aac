"""The ``mneme`` command: serve, migrate, and workspace/member/room/key administration.

Commands that create a secret (``keys create``, ``workspaces create``) print only that
secret on stdout, so scripts can capture it; everything else a person needs goes to
stderr (``serve`` aside: its stdout is for a person, its stderr for the JSON logs). Every
command uses the same database rules as ``serve``: the embedded default starts (and
migrates) its own PostgreSQL, an external database must be current. Only ``serve`` and
``migrate`` create an embedded database; the others refuse when MNEME_DATA_DIR holds none
(``db.NoEmbeddedData``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import logging
import os
import signal
import stat
import sys
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

import asyncpg

from embeddings import Embedder
from embeddings.worker import Worker, background_left, requeue
from service.http.outage import Outage
from service.ids import is_name
from service.ops import db, logs, migrations
from service.ops.bootstrap import print_first_key
from service.ops.embedding import load_embedder, worker_config, worker_listen
from service.problems import Problem
from service.queries import keys, memories, oauth, tenancy
from service.settings import TIERS, Settings, SettingsError
from service.write import erasure, transfer

log = logging.getLogger("mneme.worker")


class CliError(Exception):
    """A user-facing failure: printed as ``mneme: error: …`` with exit status 1."""


def _print_rows(header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    table = [list(header)] + [["" if v is None else str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for r in table:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())


async def _workspace(pool: asyncpg.Pool, name: str) -> tenancy.Workspace:
    ws = await tenancy.workspace_by_name(pool, name)
    if ws is None:
        raise CliError(f"no workspace named {name!r} (see `mneme workspaces list`)")
    return ws


def _split(raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]


# --- commands -----------------------------------------------------------------------------


def cmd_serve(settings: Settings, args: argparse.Namespace) -> None:
    """What a person reads goes to stdout (starting, ready, the first key), the JSON logs to
    stderr. The first key is held until the service is ready, so that it comes last, in a
    box, rather than among the start-up logs of the database and the model."""
    # Imported here, not at the top: the app (aiohttp, the MCP SDK) takes about a second
    # to import, which the administration commands need not pay.
    from service.app import create_app, model_loaded
    from service.http import server

    logs.configure(settings.log_level)
    logs.quiet_model_libraries()
    first_keys: list[str] = []
    app = create_app(settings, announce_key=first_keys.append)
    address = f"http://{settings.host}:{settings.port}"

    def ready() -> None:
        print(f"Mneme is ready on {address}", flush=True)
        for secret in first_keys:
            print_first_key(secret)

    starting = f"Mneme is starting on {address} (the database, then the embedding model)…"
    print(starting, flush=True)
    server.serve(app, settings, until_ready=lambda: model_loaded(app), on_ready=ready)


async def cmd_migrate(settings: Settings, args: argparse.Namespace) -> None:
    """``migrate`` sets a database up (embedded: initialises it if need be); ``--status``
    only reads one, so it creates none."""
    url = settings.session_url(await db.resolve_url(settings, create=not args.status))
    if url is None:
        raise SystemExit(
            "mneme migrate takes a lock for its session: behind a transaction pooler "
            "(MNEME_DATABASE_POOLER=transaction), set MNEME_DIRECT_DATABASE_URL"
        )
    conn = await db.first_connect(url, settings.database_wait_s)
    try:
        if args.status:
            states = await migrations.status(conn)
            _print_rows(
                ["version", "name", "state"], [(s.version, s.name, s.state) for s in states]
            )
            return
        applied = await migrations.migrate(conn)
        if settings.transaction_pooled:
            await db.persist_settings(conn)
    finally:
        await conn.close()
    if applied:
        for name in applied:
            print(f"applied {name}", file=sys.stderr)
    else:
        print("database is up to date", file=sys.stderr)


async def cmd_workspaces(settings: Settings, args: argparse.Namespace) -> None:
    async with db.connect(settings) as pool:
        if args.action == "list":
            found = await tenancy.list_workspaces(pool)
            _print_rows(["id", "name", "tier"], [(w.id, w.name, w.tier) for w in found])
        elif args.action == "create":
            if not is_name(args.name):
                raise CliError(f"invalid workspace name {args.name!r}")
            async with pool.acquire() as conn:
                ws = await tenancy.create_workspace(conn, args.name, args.tier)
                if ws is None:
                    raise CliError(f"workspace {args.name!r} already exists")
                _, secret = await keys.create_key(
                    conn,
                    ws.id,
                    kind="service",
                    member=None,
                    scopes=list(keys.SCOPES),
                    name="workspace-admin",
                )
            print(secret)
        elif args.action == "set-tier":
            ws = await _workspace(pool, args.name)
            await tenancy.set_workspace_tier(pool, ws.id, args.tier)
            print(f"workspace {ws.name} is now on tier {args.tier}", file=sys.stderr)


async def cmd_keys(settings: Settings, args: argparse.Namespace) -> None:
    async with db.connect(settings) as pool:
        ws = await _workspace(pool, args.workspace)
        if args.action == "create":
            scopes = _split(args.scopes)
            unknown = [s for s in scopes if s not in keys.SCOPES]
            if not scopes or unknown:
                raise CliError(
                    f"--scopes takes a comma-separated subset of {', '.join(keys.SCOPES)}"
                )
            if args.kind == "personal":
                if args.member is None:
                    raise CliError("a personal key needs --member")
                if await tenancy.get_member(pool, ws.id, args.member) is None:
                    raise CliError(f"no member {args.member!r} in workspace {ws.name!r}")
            elif args.member is not None:
                raise CliError("a service key is workspace-wide: drop --member")
            _, secret = await keys.create_key(
                pool,
                ws.id,
                kind=args.kind,
                member=args.member,
                scopes=[s for s in keys.SCOPES if s in scopes],
                name=args.name,
            )
            print(secret)
        elif args.action == "list":
            found = await keys.list_keys(pool, ws.id)
            _print_rows(
                ["id", "kind", "member", "scopes", "name", "created_at", "revoked_at"],
                [
                    (
                        k.id,
                        k.kind,
                        k.member,
                        ",".join(k.scopes),
                        k.name,
                        k.created_at.isoformat(timespec="seconds"),
                        k.revoked_at.isoformat(timespec="seconds") if k.revoked_at else None,
                    )
                    for k in found
                ],
            )
        elif args.action == "revoke":
            if not await keys.revoke_key(pool, ws.id, args.key_id):
                raise CliError(f"no key {args.key_id!r} in workspace {ws.name!r}")
            print(f"revoked {args.key_id}", file=sys.stderr)


def _when(ts: datetime | None) -> str | None:
    return ts.isoformat(timespec="seconds") if ts else None


GRANT_COLUMNS = ["id", "client", "redirect_hosts", "key", "scopes", "store", "created_at",
                 "last_used_at", "revoked_at"]  # fmt: skip


def _grant_row(g: oauth.Grant) -> list[str | None]:
    return [
        g.id,
        g.client_name or g.client_id,
        ",".join(g.redirect_hosts),
        g.key_id,
        ",".join(g.scopes),
        g.store,
        _when(g.created_at),
        _when(g.last_used_at),
        _when(g.revoked_at),
    ]


async def cmd_oauth(settings: Settings, args: argparse.Namespace) -> None:
    """The clients people connected with OAuth (/mcp), and disconnecting one."""
    async with db.connect(settings) as pool:
        ws = await _workspace(pool, args.workspace)
        if args.action == "list":
            found = await oauth.list_grants(pool, ws.id, revoked=args.all)
            _print_rows(GRANT_COLUMNS, [_grant_row(g) for g in found])
        elif args.action == "revoke":
            if not await oauth.revoke_grant(pool, args.grant_id, workspace=ws.id):
                raise CliError(f"no connected client {args.grant_id!r} in workspace {ws.name!r}")
            print(f"revoked {args.grant_id}: its tokens no longer work", file=sys.stderr)


async def cmd_members(settings: Settings, args: argparse.Namespace) -> None:
    async with db.connect(settings) as pool:
        ws = await _workspace(pool, args.workspace)
        if args.action == "create":
            if not is_name(args.id):
                raise CliError(f"invalid member id {args.id!r}")
            if await tenancy.create_member(pool, ws.id, args.id, args.kind, args.name) is None:
                raise CliError(f"member {args.id!r} already exists")
            print(f"created member {args.id}", file=sys.stderr)
        elif args.action == "list":
            found = await tenancy.list_members(pool, ws.id)
            _print_rows(["id", "kind", "name"], [(m.id, m.kind, m.name) for m in found])


async def cmd_rooms(settings: Settings, args: argparse.Namespace) -> None:
    async with db.connect(settings) as pool, pool.acquire() as conn:
        ws = await _workspace(pool, args.workspace)
        if args.action == "create":
            members = _split(args.members)
            bad = [m for m in [args.id, *members] if not is_name(m)]
            if bad:
                raise CliError(f"invalid id(s): {', '.join(bad)}")
            if await tenancy.create_room(conn, ws.id, args.id, sorted(set(members))) is None:
                raise CliError(f"room {args.id!r} already exists")
            print(f"created room {args.id}", file=sys.stderr)
        elif args.action == "list":
            found = await tenancy.list_rooms(conn, ws.id)
            _print_rows(["id", "members"], [(r.id, ",".join(r.members)) for r in found])
        elif args.action in ("add", "remove"):
            change = tenancy.add_room_member if args.action == "add" else tenancy.remove_room_member
            if not is_name(args.member):
                raise CliError(f"invalid member id {args.member!r}")
            if await change(conn, ws.id, args.room, args.member) is None:
                raise CliError(f"no room {args.room!r} in workspace {ws.name!r}")


def _embedder(settings: Settings) -> Embedder:
    print("loading the embedding model…", file=sys.stderr)
    logs.quiet_model_libraries()
    return load_embedder(settings)


async def cmd_worker(settings: Settings, args: argparse.Namespace) -> None:
    logs.configure(settings.log_level)
    # The database first: a missing one is found before the model's seconds of loading.
    async with db.connect(settings, pool_max=3, wait=True) as pool:
        embedder = await asyncio.to_thread(_embedder, settings)
        outage = Outage()
        outage.follow(pool)
        worker = Worker(
            pool,
            embedder,
            worker_config(settings),
            on_error=lambda exc: outage.note(exc, log, "worker batch failed"),
            listen=worker_listen(settings),
        )
        try:
            if args.once:
                count = await worker.drain()
                print(f"embedded {worker.stats.embedded} of {count} claimed", file=sys.stderr)
                return
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            await worker.run(stop)
        finally:
            worker.close()


# How long `mneme reembed` waits before asking again while the rows left are leased by
# another worker (`serve`'s) or back off after a failure.
REEMBED_WAIT_S = 1.0


async def cmd_reembed(settings: Settings, args: argparse.Namespace) -> None:
    from tqdm import tqdm

    async with db.connect(settings, pool_max=3, wait=True) as pool:
        embedder = await asyncio.to_thread(_embedder, settings)
        queued = await requeue(pool, embedder.name, everything=args.all)
        print(f"queued {queued} memories for {embedder.name}", file=sys.stderr)
        worker = Worker(pool, embedder, worker_config(settings))
        total = await background_left(pool)
        try:
            with tqdm(total=total, unit="mem", file=sys.stderr) as bar:
                depth = total
                while depth:
                    # Nothing claimable while rows wait: `serve`'s worker holds them, or
                    # they back off after a failure, or new writes go first. Done once
                    # every re-queued row has its vector (new writes are not waited for).
                    if not await worker.run_once():
                        await asyncio.sleep(REEMBED_WAIT_S)
                    depth = await background_left(pool)
                    bar.update(max(0, total - depth - bar.n))
        finally:
            worker.close()
        print(f"embedded {worker.stats.embedded}, failed {worker.stats.failed}", file=sys.stderr)


async def _store(pool: asyncpg.Pool, workspace: tenancy.Workspace, ref: str) -> memories.Store:
    store = await memories.resolve_store(pool, workspace.id, ref)
    if store is None:
        raise CliError(f"no store {ref!r} in workspace {workspace.name!r}")
    return store


async def cmd_import(settings: Settings, args: argparse.Namespace) -> None:
    from tqdm import tqdm

    path = Path(args.file)
    if not path.is_file():
        raise CliError(f"no such file: {path}")
    async with db.connect(settings) as pool:
        ws = await _workspace(pool, args.workspace)
        store = await _store(pool, ws, args.store)
        with path.open("rb") as f, tqdm(unit="mem", file=sys.stderr) as bar:
            try:
                result = await transfer.import_lines(
                    pool,
                    ws.id,
                    store,
                    enumerate(f, start=1),
                    create_speakers=args.create_speakers,
                    max_speakers=settings.max_speakers_per_store,
                    progress=bar.update,
                )
            except transfer.ImportRefused as exc:
                done = (
                    f"lines 1-{exc.through} were imported, nothing after them"
                    if exc.through
                    else "nothing was imported"
                )
                raise CliError(f"{path}: {exc} ({done})") from None
    print(
        f"created {result.created}, deduplicated {result.deduplicated}, "
        f"upserted {result.upserted}, speakers registered {result.speakers_registered}",
        file=sys.stderr,
    )


def private_file(path: str) -> BinaryIO:
    """``path`` opened to be written anew, readable by its owner alone (0600): an export
    holds every memory of a store, whatever the umask. A file already there is narrowed
    too (a device or a pipe named instead is left as it is)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror}") from None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.fchmod(fd, 0o600)
    except OSError as exc:
        os.close(fd)
        raise CliError(f"cannot make {path} private (0600): {exc.strerror}") from None
    return os.fdopen(fd, "wb")


async def cmd_export(settings: Settings, args: argparse.Namespace) -> None:
    from tqdm import tqdm

    async with db.connect(settings) as pool:
        ws = await _workspace(pool, args.workspace)
        store = await _store(pool, ws, args.store)
        out = private_file(args.output) if args.output else sys.stdout.buffer
        try:
            async with (
                pool.acquire() as conn,
                contextlib.aclosing(
                    transfer.export_store(
                        conn, ws.id, store.id, include_deleted=args.include_deleted
                    )
                ) as lines,
            ):
                # Progress on stderr: with -o FILE, or on a terminal while stdout is piped.
                shown = bool(args.output) or sys.stderr.isatty()
                with tqdm(unit="mem", file=sys.stderr, disable=not shown) as bar:
                    async for line in lines:
                        out.write(line)
                        bar.update(1)
            if not args.output:
                out.flush()
        except BrokenPipeError:
            # The reader stopped (`mneme export | head`): done, as any Unix filter is.
            # stdout is pointed at /dev/null so that Python's own flush at exit is quiet.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        finally:
            if args.output:
                out.close()


# --- parser -------------------------------------------------------------------------------


def _version() -> str:
    """The installed distribution's version (pyproject.toml's, via the package metadata)."""
    try:
        return importlib.metadata.version("mneme")
    except importlib.metadata.PackageNotFoundError:  # run from a tree that was never installed
        return "(version unknown: not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mneme", description="Long-term memory service for AI agents."
    )
    parser.add_argument("--version", action="version", version=f"mneme {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_data_commands(sub)
    _add_workspace_commands(sub)
    _add_key_commands(sub)
    _add_member_commands(sub)
    return parser


Subparsers = argparse._SubParsersAction  # argparse's own name for what add_subparsers makes


async def cmd_erase(settings: Settings, args: argparse.Namespace) -> None:
    """Erase everything about one person (``POST /api/v1/erasures``); prints the counts."""
    import json

    target = erasure.Target(member=args.member, speaker=args.speaker, store=args.store)
    async with db.connect(settings) as pool:
        ws = await _workspace(pool, args.workspace)
        try:
            erased = await erasure.erase(pool, ws.id, target)
        except Problem as exc:
            raise CliError(exc.message) from None
    print(json.dumps(erasure.erased_object(erased)))


def _with_workspace(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--workspace", default="default", help="workspace name (default: default)")
    return parser


def _add_data_commands(sub: Subparsers[argparse.ArgumentParser]) -> None:
    """serve, worker, reembed, import, export, migrate."""
    sub.add_parser("serve", help="run the HTTP service (and, by default, the embedding worker)")

    p = sub.add_parser("worker", help="run an embedding worker (any number may run)")
    p.add_argument("--once", action="store_true", help="drain the queue once, then exit")

    p = sub.add_parser("reembed", help="re-encode memories embedded by another model")
    p.add_argument("--all", action="store_true", help="re-encode every memory")

    p = sub.add_parser("import", help="import memories from a JSONL file into a store")
    p.add_argument("file")
    p.add_argument("--store", default="default", help="store id or name (default: default)")
    _with_workspace(p)
    p.add_argument(
        "--create-speakers",
        action="store_true",
        help="register speakers the file names that the store does not know",
    )

    p = sub.add_parser("export", help="export a store's memories as JSONL")
    p.add_argument("--store", default="default", help="store id or name (default: default)")
    _with_workspace(p)
    p.add_argument("--output", "-o", help="file to write (default: stdout)")
    p.add_argument("--include-deleted", action="store_true", help="include deleted tombstones")

    p = _with_workspace(sub.add_parser("erase", help="erase everything about one person"))
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument(
        "--member", help="a member: what names them, their pair scopes, their keys' writes"
    )
    who.add_argument("--speaker", help="a speaker's name (with --store)")
    p.add_argument("--store", help="the speaker's store (id or name)")
    p = sub.add_parser("migrate", help="apply pending database migrations")
    p.add_argument("--status", action="store_true", help="list migrations and their state")


def _add_workspace_commands(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("workspaces", help="manage workspaces")
    wsub = p.add_subparsers(dest="action", required=True)
    c = wsub.add_parser("create", help="create a workspace; prints its service key")
    c.add_argument("name")
    c.add_argument("--tier", choices=TIERS, default="free")
    wsub.add_parser("list", help="list workspaces")
    c = wsub.add_parser("set-tier", help="change a workspace's plan tier")
    c.add_argument("name")
    c.add_argument("tier", choices=TIERS)


def _add_member_commands(sub: Subparsers[argparse.ArgumentParser]) -> None:
    """members, rooms."""
    p = sub.add_parser("members", help="manage members")
    msub = p.add_subparsers(dest="action", required=True)
    c = _with_workspace(msub.add_parser("create", help="register a member"))
    c.add_argument("id")
    c.add_argument("--kind", choices=("human", "agent"), required=True)
    c.add_argument("--name")
    _with_workspace(msub.add_parser("list", help="list members"))

    p = sub.add_parser("rooms", help="manage rooms")
    rsub = p.add_subparsers(dest="action", required=True)
    c = _with_workspace(rsub.add_parser("create", help="create a room"))
    c.add_argument("id")
    c.add_argument("--members", default="", help="comma-separated member ids")
    _with_workspace(rsub.add_parser("list", help="list rooms"))
    for action in ("add", "remove"):
        c = _with_workspace(rsub.add_parser(action, help=f"{action} a room member"))
        c.add_argument("room")
        c.add_argument("member")


def _add_key_commands(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("keys", help="manage API keys")
    ksub = p.add_subparsers(dest="action", required=True)
    c = _with_workspace(ksub.add_parser("create", help="create a key; prints only the secret"))
    c.add_argument("--kind", choices=keys.KINDS, default="service")
    c.add_argument(
        "--scopes",
        default="memory:read,memory:write",
        help="comma-separated: memory:read, memory:write, admin",
    )
    c.add_argument("--member", help="member a personal key acts for")
    c.add_argument("--name", help="a label for the key")
    _with_workspace(ksub.add_parser("list", help="list keys (never their secrets)"))
    c = _with_workspace(ksub.add_parser("revoke", help="revoke a key"))
    c.add_argument("key_id")
    p = sub.add_parser("oauth", help="clients connected with OAuth (claude.ai, ChatGPT, ...)")
    osub = p.add_subparsers(dest="action", required=True)
    c = _with_workspace(osub.add_parser("list", help="list connected clients"))
    c.add_argument("--all", action="store_true", help="revoked ones too")
    c = _with_workspace(osub.add_parser("revoke", help="disconnect a client (ends its tokens)"))
    c.add_argument("grant_id")


ASYNC_COMMANDS: dict[str, Callable[[Settings, argparse.Namespace], Coroutine[Any, Any, None]]] = {
    "migrate": cmd_migrate,
    "worker": cmd_worker,
    "reembed": cmd_reembed,
    "import": cmd_import,
    "export": cmd_export,
    "erase": cmd_erase,
    "workspaces": cmd_workspaces,
    "keys": cmd_keys,
    "oauth": cmd_oauth,
    "members": cmd_members,
    "rooms": cmd_rooms,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = Settings.from_env()
        if args.command == "serve":
            cmd_serve(settings, args)
        else:
            asyncio.run(ASYNC_COMMANDS[args.command](settings, args))
    except (
        CliError,
        SettingsError,
        migrations.MigrationError,
        db.NoEmbeddedData,
        db.DatabaseUnreachable,
    ) as exc:
        print(f"mneme: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
