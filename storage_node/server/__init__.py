"""The node server: an aiohttp HTTP API over one Store (bodies in api_models.py, routes in
openapi.py; ``app.create_app`` builds the application, ``serve.run`` runs a node).

Nothing is imported here: the command line's cluster commands use small modules of this
package (``routing_state``, ``settings``) without loading the whole HTTP application.
"""
