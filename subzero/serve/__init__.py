"""``subzero serve``: the web explorer (an ASGI app over one home) and what it answers.

``create_app`` and ``Explorer`` load on first use: the command line registers ``serve``
with every other command, and a one-shot query must not pay for Starlette.
"""

#: a query's time limit by default, its wait for a worker included (--query-timeout)
QUERY_TIMEOUT_S = 30.0
#: how many queries run at once by default (--query-workers); more wait their turn
QUERY_WORKERS = 2


def __getattr__(name: str):
    # loaded on first use (Starlette, the API, queries): see the module docstring
    if name == "create_app":
        from subzero.serve.app import create_app

        return create_app
    if name == "Explorer":
        from subzero.serve.explorer import Explorer

        return Explorer
    raise AttributeError(f"module 'subzero.serve' has no attribute {name!r}")


__all__ = ["Explorer", "QUERY_TIMEOUT_S", "QUERY_WORKERS", "create_app"]
