"""Pushing jobs into the SQL broker: inserting job rows (plain, a task's, a fed task's), a
fair queue's turns of a task (fair-share-sql.md, Tags), and a task's place in its queue."""

from __future__ import annotations

from sqlalchemy import TextClause, text

from asynctask.brokers.sql.models import PLAIN_SHARE
from asynctask.brokers.sql.predicates import (
    CLAIMABLE,
    JOB_COLUMNS,
    PLAIN,
    TAGGED,
    TAGGED_ORDER,
    first_rows,
)


class PushStatements:
    def __init__(self, pg: bool) -> None:
        if pg:
            # One statement whatever the batch: the rows travel as one JSON array of arrays,
            # written by json.dumps in C. Bound as typed arrays, psycopg wrote each text element
            # in Python, escaping it with a regular expression: a 1,000-job insert took 39 ms
            # instead of 25. JSONB: parsed once, where JSON's ->> parses each row per field.
            kinds = ("TEXT", "TEXT", "TEXT", "INTEGER", "DOUBLE PRECISION", "TEXT", "TEXT", "TEXT", "BOOLEAN")

            def insert(extra: tuple[tuple[str, str], ...]) -> TextClause:
                columns = tuple(zip(JOB_COLUMNS, kinds, strict=True)) + extra
                names = ", ".join(name for name, _ in columns)
                fields = ", ".join(f"CAST(r->>{i} AS {kind})" for i, (_, kind) in enumerate(columns))
                return text(
                    f"INSERT INTO asynctask_job ({names}, attempts) "
                    f"SELECT {fields}, 0 FROM jsonb_array_elements(CAST(:rows AS JSONB)) AS r"
                )

            self.insert_jobs = insert(())
            # A task's jobs, with their turns, and fed jobs, with their feed (and turns, NULL
            # for a task's retry pushed to its feed): statements of their own, so that every
            # other insert carries no column more.
            self.insert_task_jobs = insert((("turn", "BIGINT"),))
            self.insert_fed_jobs = insert((("feed", "TEXT"), ("turn", "BIGINT")))
        else:
            # Run as executemany: SQLite has no round trips to save.
            self.insert_jobs = text(
                f"INSERT INTO asynctask_job ({', '.join(JOB_COLUMNS)}, attempts) "
                f"VALUES ({', '.join(':' + c for c in JOB_COLUMNS)}, 0)"
            )
            self.insert_task_jobs = text(
                f"INSERT INTO asynctask_job ({', '.join(JOB_COLUMNS)}, turn, attempts) "
                f"VALUES ({', '.join(':' + c for c in JOB_COLUMNS)}, :turn, 0)"
            )
            self.insert_fed_jobs = text(
                f"INSERT INTO asynctask_job ({', '.join(JOB_COLUMNS)}, feed, turn, attempts) "
                f"VALUES ({', '.join(':' + c for c in JOB_COLUMNS)}, :feed, :turn, 0)"
            )

        # A task's turns (fair-share-sql.md, Tags). The head turn, or once no tagged job
        # waits, the largest turn a tenant reached: a tenant whose jobs all ran must not find
        # its next task behind a newcomer's, as it would if turns started again from 0.
        self.start_turn = text(
            f"SELECT COALESCE(({first_rows('turn', ':queue', TAGGED, TAGGED_ORDER)}), "
            "(SELECT max(last_turn) FROM asynctask_share WHERE queue = :queue), 0)"
        )
        # The row's lock orders a tenant's concurrent tasks: the later one starts after the
        # earlier one's last turn, which it reads once the earlier one committed.
        # The parameters are cast: psycopg sends a small integer as a smallint, whose sum with
        # another would overflow at 32,767 instead of being the BIGINT of the column.
        start, n = ("CAST(:start AS BIGINT)", "CAST(:n AS BIGINT)") if pg else (":start", ":n")
        self.take_turns = text(
            f"INSERT INTO asynctask_share (queue, share, last_turn) VALUES (:queue, :share, {start} + {n}) "
            f"ON CONFLICT (queue, share) DO UPDATE SET last_turn = {'GREATEST' if pg else 'max'}("
            f"asynctask_share.last_turn, {start}) + {n} RETURNING last_turn"
        )
        # A rolled-back task's turns, given back unless a later task of its tenant took turns after them.
        self.give_back_turns = text(
            f"UPDATE asynctask_share SET last_turn = {start} "
            f"WHERE queue = :queue AND share = :share AND last_turn = {start} + {n}"
        )

        # A task's place (``SqlBroker.jobs_ahead``), each part one index probe: the head's turn,
        # how many shares have a job in the head's round, and whether plain jobs wait.
        head = first_rows("priority, turn", ":queue", TAGGED, TAGGED_ORDER)
        self.ahead_in_turns = text(
            f"WITH h AS ({head}) SELECT (SELECT turn FROM h), "
            f"(SELECT count(*) FROM asynctask_job WHERE queue = :queue AND {TAGGED} "
            "AND priority = (SELECT priority FROM h) AND turn = (SELECT turn FROM h)), "
            f"EXISTS (SELECT 1 FROM asynctask_job WHERE queue = :queue AND {PLAIN})"
        )
        self.ahead_in_order = text(
            "SELECT count(*) FROM (SELECT 1 FROM asynctask_job "
            f"WHERE queue = :queue AND {CLAIMABLE} LIMIT :bound) AS w"
        )

        # The round the plain share was last served in, plus one (``_fair_candidates``).
        self.plain_served = text(
            f"INSERT INTO asynctask_share (queue, share, last_turn) VALUES (:queue, '{PLAIN_SHARE}', :next) "
            "ON CONFLICT (queue, share) DO UPDATE SET last_turn = excluded.last_turn"
        )
