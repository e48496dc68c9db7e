"""Reference values a tenant computes before trusting a run: MEASUREMENT and HOST_DATA."""
