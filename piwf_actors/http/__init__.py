"""The HTTP door's pure parts: the routes table, tokens and roles, the OpenAPI description, the ASGI app.

The door actor (actors/http_door.py) owns the server and hands each request
to the gateway; nothing here imports `actors/`. Starlette and uvicorn are the
`http` extra: only `app.py` imports Starlette, and only the door imports it.
"""
