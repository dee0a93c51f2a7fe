"""A freshly forked API worker readies itself before it takes requests: the ORM's mappers are
configured, and the statements every submission reads with are compiled on a first connection
of each pool. Otherwise the first burst of requests pays for it, each while holding the others up
(the mappers are configured under a lock; a statement is compiled by every thread that meets it
before it is cached)."""

from __future__ import annotations

import logging

from flask import Flask
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import configure_mappers

from asynctask import tokens
from asynctask.tasks.listeners import listened_queues
from webapi.resources import EXTENSION, Resources

logger = logging.getLogger("asynctask.api")

#: Looked up at start: a token's hash that no token has (a hash is 64 hex digits).
NO_TOKEN_HASH = "-"


def warm_up(app: Flask) -> Flask:
    """Ready ``app``'s API in this process, and return it; a database that does not answer is
    left for the requests to find (they answer 503 until it does)."""
    found: Resources = app.extensions[EXTENSION]
    configure_mappers()
    listened_queues(found.client)
    try:
        tokens.caller_for_hash(found.reader, NO_TOKEN_HASH)
    except SQLAlchemyError as exc:
        logger.warning("the API started without its database: %s", exc)
    return app
