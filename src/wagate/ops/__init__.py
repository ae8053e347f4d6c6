"""Entry points and operator tools: the CLI, the worker, the sandbox, provisioning, key rotation,
the schema's full metadata for Alembic."""
