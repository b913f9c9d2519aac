"""The migrated schema can be sharded by workspace with Citus (issue 15, docs/scaling.md).

Citus distributes a table by one column and can only enforce, on each shard, the
constraints that include it: every primary key, unique index and foreign key of a
distributed table must include ``workspace_id`` (a foreign key on both sides, so the rows
it joins live on one shard). Reference tables (copied to every node) may be referenced
by distributed ones, never the other way round. No Citus here: the rules are checked on
the catalog of the migrated database, as ``create_distributed_table(...,
'workspace_id')`` would check them.
"""

from __future__ import annotations

import asyncpg

# Copied to every node: small, written rarely, read by every request on whichever node
# takes it (the key check finds a key by its secret alone, before the workspace is known:
# api_keys' unique secret index needs no workspace_id on a reference table).
# OAuth's tables are found the same way, by a token's or code's hash (oauth_clients before
# anyone has said who they are), and are small: one row per connected app and its tokens.
REFERENCE = {"workspaces", "members", "api_keys"} | {
    f"oauth_{name}" for name in ("clients", "requests", "grants", "codes", "tokens")
}
# Neither: the coordinator's own bookkeeping (the migration runner's; the janitor's lease,
# which every replica asks through the coordinator; OAuth registrations counted per client
# address, before anyone has said which workspace they are for).
LOCAL = {"schema_migrations", "leases", "oauth_registration_counts"}

TABLES = """
SELECT c.oid, c.relname,
       (SELECT a.attnum FROM pg_attribute a
        WHERE a.attrelid = c.oid AND a.attname = 'workspace_id' AND NOT a.attisdropped) AS ws
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')
"""
UNIQUE_INDEXES = """
SELECT i.indexrelid::regclass::text AS name, i.indrelid, i.indkey::int2[] AS keys
FROM pg_index i WHERE i.indisunique
"""
PRIMARY_KEYS = """
SELECT conrelid FROM pg_constraint WHERE contype = 'p'
"""
FOREIGN_KEYS = """
SELECT conname, conrelid, confrelid, conkey, confkey
FROM pg_constraint WHERE contype = 'f'
"""


async def test_every_table_can_be_distributed_by_workspace_or_is_a_reference_table(
    conn: asyncpg.Connection,
) -> None:
    tables = {r["oid"]: (r["relname"], r["ws"]) for r in await conn.fetch(TABLES)}
    names = {name for name, _ in tables.values()}
    assert names >= REFERENCE | LOCAL  # the lists name real tables
    distributed = {oid for oid, (name, ws) in tables.items() if name not in REFERENCE | LOCAL}
    # Every other table is keyed by workspace.
    missing = sorted(tables[oid][0] for oid in distributed if tables[oid][1] is None)
    assert missing == [], f"tables without workspace_id: {missing}"
    assert len(distributed) >= 15

    broken = []
    for r in await conn.fetch(UNIQUE_INDEXES):  # primary keys included
        if r["indrelid"] in distributed and tables[r["indrelid"]][1] not in r["keys"]:
            broken.append(f"unique index {r['name']} lacks workspace_id")
    for r in await conn.fetch(FOREIGN_KEYS):
        source, target = r["conrelid"], r["confrelid"]
        if source in distributed and target in distributed:
            pairs = list(zip(r["conkey"], r["confkey"], strict=True))
            if (tables[source][1], tables[target][1]) not in pairs:
                broken.append(f"foreign key {r['conname']} does not join on workspace_id")
        elif source not in distributed and target in distributed:
            broken.append(f"foreign key {r['conname']}: a reference table references a shard")
    assert broken == []


async def test_every_distributed_table_has_a_primary_key(conn: asyncpg.Connection) -> None:
    """Citus moves shards by logical replication: a table that is updated or deleted from
    needs a replica identity, and every distributed table here is one or the other."""
    tables = {r["oid"]: r["relname"] for r in await conn.fetch(TABLES)}
    keyed = {r["conrelid"] for r in await conn.fetch(PRIMARY_KEYS)}
    unkeyed = sorted(
        name for oid, name in tables.items() if oid not in keyed and name not in REFERENCE | LOCAL
    )
    assert unkeyed == []
