"""Imports by URL (`vidforge_import_asset`): a link an agent was given becomes an asset, vetted as an upload is.

web_fetch       the https fetch: the link's rules, the address guard (serve_app.outbound, shared with the webhooks,
                VIDFORGE_IMPORT_ALLOW_HOSTS its allow-list) on every connect and redirect, nothing echoed
sources         what a URL names: a web file, or an object of the server's own bucket
desk            the import desk: one actor for the cluster that runs the imports and keeps them as tasks
service         the wire's `AssetImports` over the desk
"""
