"""The declarative base of every AsyncTask table (tracking's and the SQL broker's), which
share one metadata and so one Alembic history. Its naming convention gives every constraint
a predictable name that later migrations can drop or alter."""

from __future__ import annotations

from typing import Any, ClassVar

from sqlalchemy import JSON, BigInteger, Integer, MetaData
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase

#: JSONB on PostgreSQL (compact, comparable), JSON text elsewhere.
JsonValue = JSON().with_variant(JSONB(), "postgresql")
#: SQLite only auto-increments INTEGER PRIMARY KEY, so big ids are plain integers there.
BigId = BigInteger().with_variant(Integer(), "sqlite")

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JsonValue, list[Any]: JsonValue}
