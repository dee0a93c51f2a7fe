"""Bearer tokens of the HTTP API, each bound to one tenant (table ``asynctask_api_token``); an
operator's token may also call the operator endpoints, for every tenant. An operator's token may
be bound to no tenant: the deployment's, which sees every tenant's tasks, as the API with
authentication off does.

A token is ``atk_`` plus 256 random bits. Only its SHA-256 is stored, so a leaked copy of the
table (a backup, a replica) cannot be used to call the API; the secret is returned once, by
``create_token``.
"""

from __future__ import annotations

import hashlib
import secrets
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Connection, Engine, func, insert, select, update

from asynctask.db.engine import as_utc, writer
from asynctask.tracking.models import ApiToken

#: Every token starts with this, so that secret scanners (and people) can recognise one.
TOKEN_PREFIX = "atk_"
#: The length of ``asynctask_api_token.tenant`` and ``.label``.
MAX_NAME_LENGTH = 200


@dataclass(frozen=True)
class CreatedToken:
    id: str
    tenant: str | None
    label: str | None
    #: The secret: not stored anywhere, so this is the only time it can be read.
    token: str
    operator: bool = False


@dataclass(frozen=True)
class TokenInfo:
    id: str
    tenant: str | None
    label: str | None
    created_at: datetime
    revoked_at: datetime | None
    operator: bool = False


@dataclass(frozen=True, slots=True)
class Caller:
    """Who presented a token: a tenant's, or (``tenant`` None) the deployment's, an operator."""

    tenant: str | None
    operator: bool

    def __post_init__(self) -> None:
        if self.tenant is None and not self.operator:
            raise ValueError(NO_TENANT)


def hash_token(token: str) -> str:
    # The token holds 256 random bits, so no dictionary or brute force can reverse its hash:
    # a plain SHA-256 without salt or stretching is enough (GitHub stores its tokens likewise),
    # and it keeps the lookup a single equality match on an index.
    return hashlib.sha256(token.encode()).hexdigest()


#: Why a token or caller with no tenant is refused unless it is an operator's.
NO_TENANT = "a token of no tenant is the deployment's: it must be an operator's"


def create_token(
    engine: Engine, tenant: str | None, label: str | None = None, *, operator: bool = False
) -> CreatedToken:
    """A new token of ``tenant``; of none (the deployment's) only for an ``operator``."""
    if tenant is not None:
        check_name("tenant", tenant)
    elif not operator:
        raise ValueError(NO_TENANT)
    if label is not None:
        check_name("label", label)
    created = CreatedToken(
        id=secrets.token_hex(6),
        tenant=tenant,
        label=label,
        token=TOKEN_PREFIX + secrets.token_urlsafe(32),
        operator=operator,
    )
    with writer(engine).begin() as connection:
        connection.execute(
            insert(ApiToken).values(
                id=created.id,
                tenant=tenant,
                label=label,
                token_hash=hash_token(created.token),
                created_at=datetime.now(UTC),
                operator=operator,
            )
        )
    return created


def revoke_token(engine: Engine, token_id: str) -> bool:
    """Revoke a token for good; False if there is no token with this id. Revoking a revoked token
    again succeeds and keeps the time of the first revocation."""
    with writer(engine).begin() as connection:
        result = connection.execute(
            update(ApiToken)
            .where(ApiToken.id == token_id)
            .values(revoked_at=func.coalesce(ApiToken.revoked_at, datetime.now(UTC)))
        )
    return result.rowcount > 0


def list_tokens(engine: Engine, tenant: str | None = None) -> list[TokenInfo]:
    """Every token (of ``tenant`` if given), revoked ones included, oldest first."""
    query = select(
        ApiToken.id,
        ApiToken.tenant,
        ApiToken.label,
        ApiToken.created_at,
        ApiToken.revoked_at,
        ApiToken.operator,
    ).order_by(ApiToken.created_at, ApiToken.id)
    if tenant is not None:
        query = query.where(ApiToken.tenant == tenant)
    with engine.connect() as connection:
        rows = connection.execute(query).all()
    return [
        TokenInfo(
            id=row.id,
            tenant=row.tenant,
            label=row.label,
            created_at=as_utc(row.created_at) or row.created_at,
            revoked_at=as_utc(row.revoked_at),
            operator=bool(row.operator),
        )
        for row in rows
    ]


def caller_for(bind: Engine | Connection, token: str) -> Caller | None:
    """Who a presented token belongs to; None if it is unknown or revoked."""
    # Anything else cannot be one of ours: no need to ask the database (nor to encode, say, a
    # lone surrogate).
    if not token.startswith(TOKEN_PREFIX) or not token.isascii():
        return None
    return caller_for_hash(bind, hash_token(token))


def caller_for_hash(bind: Engine | Connection, token_hash: str) -> Caller | None:
    """Who the token of this ``hash_token`` belongs to; None if it is unknown or revoked (a
    dashboard session holds the hash, never the token)."""
    query = select(ApiToken.tenant, ApiToken.operator).where(
        ApiToken.token_hash == token_hash, ApiToken.revoked_at.is_(None)
    )
    if isinstance(bind, Connection):
        row = bind.execute(query).first()
    else:
        with bind.connect() as connection:
            row = connection.execute(query).first()
    return None if row is None else Caller(row.tenant, bool(row.operator))


def check_name(field: str, value: str) -> None:
    """Raise ValueError unless ``value`` fits a tenant or label column: not empty, at most
    ``MAX_NAME_LENGTH`` characters, no control characters."""
    if not value:
        raise ValueError(f"{field} must not be empty")
    if len(value) > MAX_NAME_LENGTH:
        raise ValueError(f"{field} must be at most {MAX_NAME_LENGTH} characters, not {len(value)}")
    if any(unicodedata.category(char) == "Cc" for char in value):
        raise ValueError(f"{field} must not contain control characters")
