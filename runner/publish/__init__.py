"""Publishing envelopes to tenants: publisher and spool, publication service, tenant fetch.

``docs/publishing.md`` describes the HTTP API, the storage, the log format and operations.
"""
