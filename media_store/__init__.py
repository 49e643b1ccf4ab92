"""vidforge's media (assets, watermark previews, rendered videos): one interface, two backends.

    VIDFORGE_STORAGE_URL unset   -> LocalMediaStore(<data_dir>): files under the data dir, as one node sees them
    VIDFORGE_STORAGE_URL=s3://B/P -> S3MediaStore: objects in bucket B under prefix P; no shared filesystem

The registry's own state (SQLite) is not media: it stays on the head node's disk (VIDFORGE_STATE_DIR).
Layout and deletion rules live in media_store.assets, media_store.artifacts and media_store.hygiene; the
backends only store bytes under keys. Importable from every room but mcp_protocol (which stays free of
storage and Ray); it imports nothing of vidforge but render_kernels' `Media` type.
"""
