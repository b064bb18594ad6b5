"""Schemas: the entry JSON schema (YAML, for jsonschema) and pandera
DataFrameModels for every table dawnpipe writes or reads (``results``)."""
