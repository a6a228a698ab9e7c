"""Pure per-request decisions: consent, eligibility, identity, base prices, partner
rate limits, overload shedding, user profiles and their cache."""
