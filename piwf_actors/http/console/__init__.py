"""The web console: pages served by the HTTP door (docs/http.md, "Console").

`pages.py` holds the Starlette handlers (added to the door's app by
`http/app.py`), `session.py` the sign-in sessions and CSRF tokens, `shapes.py`
the pure functions that turn receipts into what the templates show (the
run's picture is `workflows.graph_render.tree`, as `piwf graph` draws it),
`templates/` the Jinja2 pages and `static/` the hand-written CSS and
JavaScript (no CDN, no build step: they ship in the wheel).
"""
