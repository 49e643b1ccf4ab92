"""vidforge actors: the TaskRegistry (sole owner of task state), its durable stores (SQLite, PostgreSQL), and the
typed clients of the registry and the render supervisor actors."""
