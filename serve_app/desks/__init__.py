"""Desks: the actors that run a kind of tool call (an import, an inspection) as jobs kept as tasks, outside the
TaskRegistry, which keeps renders only.

job_desk        the table every desk keeps (cap, get, wait, cancel, TTL), and how a replica reaches a desk's actor
"""
