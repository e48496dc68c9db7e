"""The publication service (``attested-replay serve``): HTTP routes, bearer tokens, rate
limits, corpus exports, witnesses and the trust panel, over the log component
(:mod:`runner.service.log`)."""
