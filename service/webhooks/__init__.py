"""Webhooks: endpoints told when memories change (the outbox of 0025_webhooks.sql).

``outbound`` is how a request leaves the service safely, ``signing`` what a receiver
checks, ``dispatcher`` the loop that sends every delivery (on one replica at a time).
"""
