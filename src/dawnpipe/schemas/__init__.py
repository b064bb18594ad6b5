"""Schemas: the entry JSON schema (YAML, for jsonschema) and the column
schemas (``tables``) of every table dawnpipe writes or reads (``results``,
``submissions``)."""
