"""The base every other part stands on: the clock, no-bid reasons, campaigns, the
ledger entry and notice token formats, money, and the metrics registry."""
