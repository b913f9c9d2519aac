"""The whole HTTP surface, in one list.

``scope`` is what the calling key needs; ``None`` means no key (operational endpoints).
The access middleware reads it from here, and a test holds this list and the OpenAPI
document to the same set of operations.
"""

from __future__ import annotations

from service.faces import (
    activity,
    admin,
    browse,
    consent,
    erasures,
    mcp,
    memories,
    meta,
    oauth,
    search,
    speakers,
    stores,
    webhooks,
)
from service.http.public import PROTECTED_RESOURCE_PATH
from service.http.route import ADMIN, READ, WRITE, Route
from service.oauth.provider import CONSENT_PATH

ROUTES: list[Route] = [
    # Operations
    Route("GET", "/healthz", meta.healthz, None),
    Route("GET", "/readyz", meta.readyz, None),
    Route("GET", "/metrics", meta.metrics, None),
    Route("GET", "/openapi.json", meta.openapi, None),
    Route("GET", "/llms.txt", meta.llms_txt, None),
    Route("GET", "/", meta.page, None),
    Route("GET", "/static/{name}", meta.static_file, None),
    # MCP over Streamable HTTP (the tools act with the caller's key; service.faces.mcp)
    Route("POST", mcp.PATH, mcp.handle, READ, tokens=True),
    Route("GET", mcp.PATH, mcp.no_session, READ, tokens=True),
    Route("DELETE", mcp.PATH, mcp.no_session, READ, tokens=True),
    Route("OPTIONS", mcp.PATH, mcp.preflight, None),
    # OAuth 2.1 for /mcp: discovery, the MCP SDK's endpoints, the consent page
    # (service.faces.oauth, service.faces.consent)
    *(
        Route(method, path, handler, None)
        for path, document in [
            (PROTECTED_RESOURCE_PATH, oauth.protected_resource_document),
            (PROTECTED_RESOURCE_PATH + mcp.PATH, oauth.protected_resource_document),
            ("/.well-known/oauth-authorization-server", oauth.authorization_server_document),
        ]
        for method, handler in [("GET", document), ("OPTIONS", oauth.preflight)]
    ),
    Route("GET", oauth.AUTHORIZE_PATH, oauth.authorize, None),
    Route("POST", oauth.AUTHORIZE_PATH, oauth.authorize, None),
    *(
        Route(method, path, handler, None)
        for path, endpoint in [
            (oauth.TOKEN_PATH, oauth.token),
            (oauth.REGISTER_PATH, oauth.register),
            (oauth.REVOKE_PATH, oauth.revoke),
        ]
        for method, handler in [("POST", endpoint), ("OPTIONS", oauth.preflight)]
    ),
    Route("GET", CONSENT_PATH, consent.show, None),
    Route("POST", CONSENT_PATH, consent.answer, None),
    Route("GET", "/api/v1/oauth/grants", oauth.list_grants, READ),
    Route("DELETE", "/api/v1/oauth/grants/{grant_id}", oauth.revoke_grant, READ),
    # Browse face (seed 000)
    Route("GET", "/api/v1/memories", browse.list_memories, READ),
    # Search face (seed 002)
    Route("POST", "/api/v1/memory/search", search.search, READ, prefetch=search.prefetch),
    Route("GET", "/api/v1/usage", search.get_usage, READ),
    Route("GET", "/api/v1/activity", activity.get_activity, READ),
    # Write API
    Route("POST", "/api/v1/memories", memories.create_memories, WRITE),
    Route("GET", "/api/v1/memories/{memory_id}", memories.get_memory, READ),
    Route("PATCH", "/api/v1/memories/{memory_id}", memories.patch_memory, WRITE),
    Route("DELETE", "/api/v1/memories/{memory_id}", memories.delete_memory, WRITE),
    Route("GET", "/api/v1/memories/{memory_id}/versions", memories.list_versions, READ),
    Route("GET", "/api/v1/memories/{memory_id}/media", memories.get_media, READ),
    Route("GET", "/api/v1/stores/{store}/speakers", speakers.list_speakers, READ),
    Route("POST", "/api/v1/stores/{store}/speakers", speakers.add_speaker, WRITE),
    Route("DELETE", "/api/v1/stores/{store}/speakers/{name}", speakers.delete_speaker, WRITE),
    # Memory Store face (seed 003)
    *(
        Route(method, "/api/v1/forward/memory_stores" + path, handler, scope, plain_errors=True)
        for method, path, handler, scope in [
            ("POST", "", stores.create_store, ADMIN),
            ("GET", "", stores.list_stores, READ),
            ("GET", "/{store_id}", stores.get_store, READ),
            ("POST", "/{store_id}", stores.update_store, ADMIN),
            ("DELETE", "/{store_id}", stores.delete_store, ADMIN),
            ("POST", "/{store_id}/memories", stores.create_memory, WRITE),
            ("GET", "/{store_id}/memories", stores.list_memories, READ),
            ("GET", "/{store_id}/memories/{memory_id}", stores.get_memory, READ),
            ("POST", "/{store_id}/memories/{memory_id}", stores.update_memory, WRITE),
            ("DELETE", "/{store_id}/memories/{memory_id}", stores.delete_memory, WRITE),
            ("GET", "/{store_id}/memories/{memory_id}/versions", stores.list_versions, READ),
        ]
    ),
    # Admin: members, rooms, keys
    Route("POST", "/api/v1/members", admin.create_member, ADMIN),
    Route("GET", "/api/v1/members", admin.list_members, ADMIN),
    Route("POST", "/api/v1/rooms", admin.create_room, ADMIN),
    Route("GET", "/api/v1/rooms", admin.list_rooms, ADMIN),
    Route("PUT", "/api/v1/rooms/{room_id}/members/{member_id}", admin.add_room_member, ADMIN),
    Route("DELETE", "/api/v1/rooms/{room_id}/members/{member_id}", admin.remove_room_member, ADMIN),
    Route("POST", "/api/v1/keys", admin.create_key, ADMIN),
    Route("GET", "/api/v1/keys", admin.list_keys, ADMIN),
    Route("DELETE", "/api/v1/keys/{key_id}", admin.revoke_key, ADMIN),
    # Erasure of a person (service.write.erasure)
    Route("POST", "/api/v1/erasures", erasures.create_erasure, ADMIN),
    # Webhooks (service.faces.webhooks; sent by service.webhooks.dispatcher)
    Route("POST", "/api/v1/webhooks", webhooks.create_webhook, ADMIN),
    Route("GET", "/api/v1/webhooks", webhooks.list_webhooks, ADMIN),
    Route("GET", "/api/v1/webhooks/{webhook_id}", webhooks.get_webhook, ADMIN),
    Route("DELETE", "/api/v1/webhooks/{webhook_id}", webhooks.delete_webhook, ADMIN),
    Route("GET", "/api/v1/webhooks/{webhook_id}/deliveries", webhooks.list_deliveries, ADMIN),
    Route(
        "POST",
        "/api/v1/webhooks/{webhook_id}/deliveries/{event_id}/retry",
        webhooks.retry_delivery,
        ADMIN,
    ),
]
