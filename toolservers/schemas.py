"""Is a tool's announced input schema a valid JSON Schema? (What the pages show.)

The engine leaves a tool with an invalid schema out of every turn (`toolservers.provider`
checks it once per distinct schema); the pages ask the same question here, so a chat's
tools page and the staff Tools page show such a tool as off, with the reason.
"""

import json
from functools import lru_cache

import jsonschema

INVALID_SCHEMA = "invalid schema"


@lru_cache(maxsize=4096)
def _problem(schema_json: str) -> str:
    schema = json.loads(schema_json)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError:
        return INVALID_SCHEMA
    return ""


def schema_problem(schema) -> str:
    """ "" for a valid JSON Schema, else why the engine leaves the tool out ("invalid schema")."""
    if not isinstance(schema, dict):
        return INVALID_SCHEMA
    return _problem(json.dumps(schema, sort_keys=True, default=str))
