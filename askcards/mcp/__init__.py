"""askcards as a Model Context Protocol server at ``/mcp`` (Streamable HTTP, the official SDK).

``app`` is the edge (auth, limits, Host/Origin) in front of the SDK's stateless transport,
``caller`` resolves the agent and the URL's session, ``server`` holds the handlers (tools, calls,
tasks) and ``results`` turns asks into tool results and tasks. Everything here goes through
askcards' public services and selectors, like the REST API.
"""
