"""One UPDATE for many rows with a value of their own each (`UPDATE ... FROM (VALUES ...)`,
PostgreSQL and SQLite 3.33+). Django's `bulk_update` writes the same single statement but
builds a CASE WHEN expression per row and field in Python, which cost the dispatcher
seconds for a thousand runs on this machine; here each value only goes through its field's
database conversion."""

from django.db import models, transaction


def update_rows(
    model: type[models.Model],
    fields: list[str],
    rows: list[tuple],
    *,
    same: dict[str, object] | None = None,
) -> int:
    """Set `fields` of each row from `rows` (tuples of the primary key then one value per
    field), and every field in `same` to one value, in one UPDATE; returns the rows updated."""
    if not rows:
        return 0
    connection = transaction.get_connection()
    meta = model._meta
    quote = connection.ops.quote_name
    table = quote(meta.db_table)
    columns = [meta.pk, *(meta.get_field(name) for name in fields)]
    postgres = connection.vendor == "postgresql"

    def value(position: int) -> str:
        # VALUES columns are named column1, column2, ... on both databases. PostgreSQL types
        # a column of parameters (or of NULLs) as text unless told.
        name = f"v.column{position + 1}"
        return f"CAST({name} AS {columns[position].db_type(connection)})" if postgres else name

    assignments = [f"{quote(columns[i].column)} = {value(i)}" for i in range(1, len(columns))]
    params: list = []
    for name, constant in (same or {}).items():
        field = meta.get_field(name)
        assignments.append(f"{quote(field.column)} = %s")
        params.append(field.get_db_prep_save(constant, connection))
    placeholders = "(" + ", ".join(["%s"] * len(columns)) + ")"
    for row in rows:
        params += [
            column.get_db_prep_save(item, connection)
            for column, item in zip(columns, row, strict=True)
        ]
    sql = (
        f"UPDATE {table} SET {', '.join(assignments)} "
        f"FROM (VALUES {', '.join([placeholders] * len(rows))}) AS v "
        f"WHERE {table}.{quote(meta.pk.column)} = {value(0)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount
