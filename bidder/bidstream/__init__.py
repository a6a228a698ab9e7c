"""Synthetic bidstreams: the generator (population, inventory, auctions, rendering,
privacy and malformed bodies) and the bidstream file format."""
