"""Plain INSERTs for the hot paths (ingestion, the Telegram update service).

`insert_row(instance)` writes the row `instance.save(force_insert=True)` writes, with each
field's own database conversion, but without the generic save machinery, which costs as
much as the database's own work there. Use it only for models without a save() override
and without pre_save/post_save receivers; the SQL is built once per model and connection
vendor. Integrity errors are raised as from save().
"""

from django.db import models, transaction

_statements: dict[tuple[type, str], tuple[str, list]] = {}


def _statement(model: type[models.Model], connection) -> tuple[str, list]:
    key = (model, connection.vendor)
    if key not in _statements:
        meta = model._meta
        fields = [field for field in meta.concrete_fields if not field.primary_key]
        quote = connection.ops.quote_name
        sql = "INSERT INTO {} ({}) VALUES ({}) RETURNING {}".format(
            quote(meta.db_table),
            ", ".join(quote(field.column) for field in fields),
            ", ".join(["%s"] * len(fields)),
            quote(meta.pk.column),
        )
        _statements[key] = (sql, fields)
    return _statements[key]


def insert_row(instance: models.Model) -> models.Model:
    """INSERT `instance` as a new row and set its primary key; returns it."""
    connection = transaction.get_connection()
    sql, fields = _statement(type(instance), connection)
    params = [
        field.get_db_prep_save(field.pre_save(instance, True), connection) for field in fields
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        instance.pk = cursor.fetchone()[0]
    instance._state.adding = False
    instance._state.db = connection.alias
    return instance


def insert_rows(instances: list[models.Model]) -> list[models.Model]:
    """INSERT `instances` (all of one model, none saved) in one statement and set their
    primary keys: `insert_row` for many rows, what `bulk_create` writes without the query
    compiler's per-value machinery (about a second for a thousand turns and messages on
    this machine). The same rule: models without a save() override or signal receivers."""
    if not instances:
        return instances
    connection = transaction.get_connection()
    model = type(instances[0])
    meta = model._meta
    quote = connection.ops.quote_name
    fields = [field for field in meta.concrete_fields if not field.primary_key]
    params: list = []
    for instance in instances:
        params += [
            field.get_db_prep_save(field.pre_save(instance, True), connection) for field in fields
        ]
    placeholders = "(" + ", ".join(["%s"] * len(fields)) + ")"
    sql = "INSERT INTO {} ({}) VALUES {} RETURNING {}".format(
        quote(meta.db_table),
        ", ".join(quote(field.column) for field in fields),
        ", ".join([placeholders] * len(instances)),
        quote(meta.pk.column),
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        ids = [row[0] for row in cursor.fetchall()]
    # RETURNING's order is not promised (SQLite says so); the ids one statement draws from
    # its table's sequence (PostgreSQL) or rowid (SQLite) increase in the VALUES' order.
    for instance, pk in zip(instances, sorted(ids), strict=True):
        instance.pk = pk
        instance._state.adding = False
        instance._state.db = connection.alias
    return instances


_selects: dict[tuple[str, str], str] = {}


def fetch_prepared(name: str, build, params: list) -> list[tuple]:
    """The rows of a SELECT that `build(quote_name)` writes, once per `name` and connection
    vendor: for reads that run on every turn, where compiling a queryset would cost more CPU
    than the database spends running it. Build the SQL from the models' `_meta` names and
    pass values only as `params`."""
    connection = transaction.get_connection()
    key = (name, connection.vendor)
    sql = _selects.get(key)
    if sql is None:
        sql = _selects[key] = build(connection.ops.quote_name)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()
