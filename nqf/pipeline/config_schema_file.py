"""The config schema as one file, ``workflow/schemas/config.schema.yaml``: nqf's shared keys and
every kind's section in one self-contained JSON schema, where a Snakemake workflow keeps its schema
and what ``snakemake.utils.validate`` (or an editor) reads. Written by ``python -m nqf schema``;
tests/pipeline/test_config.py checks that the file in the repository is current. nqf itself
validates with :func:`nqf.pipeline.config.validate_config` (two passes, one-sentence errors).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from nqf.pipeline.config import load_schema

# The schema as one file, every kind's section included (:func:`standalone_schema`): where a
# Snakemake workflow keeps its schema, and what snakemake.utils.validate reads.
WORKFLOW_SCHEMA = Path("workflow") / "schemas" / "config.schema.yaml"
STANDALONE_COMMENT = (
    "The nqf config schema as one file: nqf/schemas/config.schema.yaml (the shared keys) with every kind's "
    "section (nqf/experiments/<kind>/schema.yaml) under $defs/<kind>, and an experiment checked against the "
    "section of its kind. Generated: do not edit; edit those files and run "
    "`python -m nqf schema > workflow/schemas/config.schema.yaml` (tests/pipeline/test_config.py checks that "
    "this file is current). The workflow validates its config with it through snakemake.utils.validate, after "
    "nqf's own stricter reading (nqf.pipeline.config: one-sentence errors; duplicate keys, aliases, NaN/inf "
    "refused). Written as JSON, which is also YAML: Snakemake reads it in 0.04 s instead of 0.4 s, in every "
    "snakemake call."
)


def standalone_schema() -> dict:
    """The config schema (:func:`load_schema`) as one self-contained JSON schema: each experiment
    is also checked against ``$defs/<its kind>`` (an ``if``/``then`` per kind), so a generic
    validator (snakemake.utils.validate, an editor) checks a whole config without nqf's two passes."""
    schema = load_schema()
    experiment = schema["properties"]["experiments"]["additionalProperties"]
    experiment["allOf"] = [{"if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]},
                            "then": {"$ref": f"#/$defs/{kind}"}}
                           for kind in experiment["properties"]["kind"]["enum"]]
    return schema


def standalone_schema_text() -> str:
    """:func:`standalone_schema` as the text of ``workflow/schemas/config.schema.yaml``: JSON (also
    YAML), which Snakemake's schema reader parses with ``json`` before it tries a YAML parser in
    pure Python; :data:`STANDALONE_COMMENT` as its ``$comment``."""
    schema = standalone_schema()
    ordered = {"$schema": schema.pop("$schema"), "$comment": STANDALONE_COMMENT, **schema}
    text = json.dumps(ordered, indent=1, ensure_ascii=False) + "\n"
    # a float JSON writes without a point (1e-05) is a string to YAML 1.1 (PyYAML): written 1.0e-05, it
    # is the same number to both (only whole lines that hold a number value match: never a string)
    return re.sub(r'^(\s*(?:"[^"\n]*": )?-?\d+)(e[-+]\d+,?)$', r"\1.0\2", text, flags=re.M)
