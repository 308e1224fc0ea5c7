"""The dashboard: pages, a read API, actions, a live stream and metrics, served beside the receiver.

An edge like the others: it imports the core and itself. The process module
composes its routes and its guard into the receiver's app (``app.Dashboard``).
"""
