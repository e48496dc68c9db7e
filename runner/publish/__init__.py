"""The publisher, in the replay's pod: deliver an envelope to a ``dir://`` or ``https://``
target from a local spool. The service it publishes to is :mod:`runner.service`."""
