"""OAuth 2.1 for ``/mcp`` (issue 46): Mneme as its own authorization server.

``provider`` is the MCP SDK's provider protocol over PostgreSQL; the HTTP side (discovery
documents, the SDK's handlers behind the ASGI bridge, the consent page) is
``service.faces.oauth`` and ``service.faces.consent``.
"""
