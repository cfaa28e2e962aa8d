"""Can the engine offer a tool: is its input schema a valid JSON Schema, and does it run
without MCP tasks? (What the pages show.)

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


NEEDS_TASKS = "runs only as an MCP task (taskSupport: required), which the hub does not do"


def tool_problem(tool) -> str:
    """ "" when the engine may offer `tool` (a ServerTool), else why it never does: an
    invalid schema, or a tool whose every plain call fails because it must run as a task."""
    if getattr(tool, "task_support", "") == "required":
        return NEEDS_TASKS
    return schema_problem(tool.input_schema)


def schema_problem(schema) -> str:
    """ "" for a valid JSON Schema, else why the engine leaves the tool out ("invalid schema")."""
    if not isinstance(schema, dict):
        return INVALID_SCHEMA
    return _problem(json.dumps(schema, sort_keys=True, default=str))
