"""Declarative YAML release specs (version 1): load, validate, run.

>>> from hierdp.spec import validate, run_spec, schema_text
>>> '"hierdp"' in schema_text()
True

See ``docs/spec.md`` for the language and ``hierdp schema`` for the JSON Schema.
"""

from hierdp.spec.loader import Issue, LoadedSpec, load_file, load_text
from hierdp.spec.runner import evaluate_spec, load_spec, prepare, run_spec
from hierdp.spec.schema import SCHEMA_VERSION, load_schema, schema_text
from hierdp.spec.validate import LevelSpec, ReleaseSpec, validate

__all__ = ["SCHEMA_VERSION", "Issue", "LoadedSpec", "LevelSpec", "ReleaseSpec", "load_file", "load_text",
           "load_schema", "schema_text", "validate", "load_spec", "run_spec", "prepare", "evaluate_spec"]
