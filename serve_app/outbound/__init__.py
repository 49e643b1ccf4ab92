"""Requests to hosts vidforge's callers name (an import's link, a webhook's notify_url): the defence against
server-side request forgery that URL import (serve_app.importing) and the webhooks (serve_app.webhooks) share.

address_guard   which addresses a connection may go to: public ones, or those an allow-list names; resolved once
                and pinned
transport       the one client: connections to the pinned address, no proxy, no redirect followed, no reuse

Its refusals are its own (`AddressRefused`, `NameUnresolved`); each caller words them as its own errors.

May import: nothing of serve_app (the lower rooms only).
"""
