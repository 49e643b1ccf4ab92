"""Imports by URL (`vidforge_import_asset`): a link an agent was given becomes an asset, vetted as an upload is.

address_guard   which hosts and addresses an import may connect to (VIDFORGE_IMPORT_ALLOW_HOSTS)
web_fetch       the https fetch: the guard on every connect and redirect, the address pinned, nothing echoed
sources         what a URL names: a web file, or an object of the server's own bucket
desk            the import desk: one actor for the cluster that runs the imports and keeps them as tasks
service         the wire's `AssetImports` over the desk
"""
